import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_engine_imports_nothing_from_django_tools_or_llm():
    # A fresh interpreter: this test process has Django loaded already.
    check = (
        "import sys, plans.engine\n"
        "loaded = [m for m in sys.modules if m.split('.')[0] == 'django'"
        " or m.startswith(('plans.tools', 'plans.llm', 'plans.models'))]\n"
        "print(' '.join(sorted(loaded)))\n"
    )

    result = subprocess.run(  # noqa: S603 - our own interpreter and a fixed script
        [sys.executable, "-c", check], cwd=REPO, capture_output=True, text=True, check=True
    )

    assert result.stdout.strip() == ""
