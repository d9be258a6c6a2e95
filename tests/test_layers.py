"""The floors contract (pyproject.toml) refuses an import upward: checked on a copy of the tree."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    shutil.copytree(
        ROOT / "plans", tmp_path / "plans", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copytree(ROOT / "agentsite", tmp_path / "agentsite")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603 - the venv's own lint-imports
        [str(LINT_IMPORTS), "--no-cache"], cwd=tree, capture_output=True, text=True, check=False
    )


def add_import(tree: Path, module: str, line: str) -> None:
    path = tree / (module.replace(".", "/") + ".py")
    path.write_text(path.read_text() + f"\n{line}\n")


def test_the_tree_as_it_is_keeps_the_floors(tree):
    checked = lint_imports(tree)

    assert checked.returncode == 0, checked.stdout
    assert "Floors: each imports only its own and those below (ARCHITECTURE.md) KEPT" in (
        checked.stdout
    )


@pytest.mark.parametrize(
    ("module", "line", "broken"),
    [
        (
            "plans.services.runs",
            "from plans.runtime import advance  # noqa",
            "plans.services is not allowed to import plans.runtime",
        ),
        (
            "plans.selectors.runs",
            "from plans.services import approvals  # noqa",
            "plans.selectors is not allowed to import plans.services",
        ),
        (
            "plans.journal.events",
            "def later():\n    from plans.services import runs  # noqa",
            "plans.journal is not allowed to import plans.services",
        ),
        (
            "plans.engine.graph",
            "from plans import models  # noqa",
            "plans.engine is not allowed to import plans.models",
        ),
        (
            "plans.selectors.costs",
            "from plans.ui import charts  # noqa",
            "plans.selectors.costs -> plans.ui.charts",
        ),
        (
            "plans.consumers",
            "from plans.views import goals  # noqa",
            "plans.consumers -> plans.views.goals",
        ),
        (
            "plans.tools.registry",
            "from plans.journal import events  # noqa",
            "plans.tools is not allowed to import plans.journal",
        ),
    ],
)
def test_an_import_upward_breaks_the_floors(tree, module, line, broken):
    add_import(tree, module, line)

    checked = lint_imports(tree)

    assert checked.returncode == 1
    assert broken in checked.stdout
