"""`./dev bench compare`'s bookkeeping figures: the script measures the tree it is pointed at,
with the answer call priced, and compare reads both figures (plumbing only: no timing is
asserted)."""

from pathlib import Path

from benchmarks import compare

ROOT = Path(__file__).resolve().parent.parent


def test_compare_reads_the_creation_and_priced_run_figures_of_a_tree(monkeypatch):
    seen: list[str] = []
    run = compare._run

    def noting(tree, script, *args):
        out = run(tree, script, *args, "--batches", "1")
        seen.append(out)
        return out

    monkeypatch.setattr(compare, "_run", noting)

    figures = compare.bookkeeping_figures(ROOT)

    assert set(figures) == {
        "run creation (5-step plan), CPU/run ms",
        "1-step run, priced answer call, CPU/run ms",
    }
    assert all(value > 0 for value in figures.values())
    assert all(compare.is_slower(name) for name in figures)  # judged like the other CPU figures
    assert f"plans from {ROOT / 'plans'}" in seen[0]  # the tree asked for, not an installed copy
