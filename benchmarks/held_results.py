"""Tokens with a 200 KB tool result: pasted whole into later prompts, or held by reference.

One run of a 2-step plan (bench_report: 500 rows, about 205,000 chars of JSON; then a 0 ms
step) on the offline model, first with AGENTSITE_PROMPT_RESULT_MAX_CHARS past any result (the
whole result in the prompt, as before), then with the default limit (an extract by reference).
Prints the answer call's recorded tokens and its input's cost at the answer model's prices, and
the replan prompt's and a ReAct turn's tokens for the same outcomes. The offline model counts
four characters a token, as the budget estimate does.

    .venv/bin/python benchmarks/held_results.py
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PLAN = {
    "steps": [
        {"id": 1, "tool": "bench_report", "args": {"rows": 500}},
        {"id": 2, "tool": "bench_sleep", "args": {"ms": 0}, "depends_on": [1]},
    ]
}


def measure(limit: int | None) -> dict[str, object]:
    """One run with the prompt limit (None: the setting's default): its figures."""
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.test import override_settings

    from plans.llm import Usage, model_for
    from plans.llm.pricing import cost_usd, prices_for
    from plans.llm.prompts import react_request, replan_request
    from plans.models import ModelCall, Run
    from plans.runtime.advance import advance_run
    from plans.runtime.planning import held_limits, step_outcomes
    from plans.services.runs import run_create

    limit = settings.AGENTSITE_PROMPT_RESULT_MAX_CHARS if limit is None else limit
    with override_settings(AGENTSITE_PROMPT_RESULT_MAX_CHARS=limit):
        user, _ = get_user_model().objects.get_or_create(username="bench")
        run = run_create(author=user, goal_text="Summarise the sales report", plan_data=PLAN)
        advance_run(run.pk)
        run = Run.objects.get(pk=run.pk)
        assert run.status == "completed", run.status
        answer = ModelCall.objects.get(run=run, purpose="answer")
        plan_row = run.plans.get()
        steps = {s.step_id: s for s in plan_row.steps.all()}
        replan = replan_request(
            goal=run.goal.text,
            catalog=[],
            max_steps=10,
            model=model_for("replan"),
            plan=PLAN,
            outcomes=step_outcomes(steps, version=plan_row.version),
            held=held_limits(),
        )
        # A ReAct turn after the same two calls (the loop builds its prompt from the same rows).
        react = react_request(
            goal=run.goal.text,
            catalog=[],
            actions=step_outcomes(steps, version=plan_row.version),
            model=model_for("act"),
            held=held_limits(),
        )
    return {
        "limit": limit,
        "result_chars": len(json.dumps(steps[1].result, ensure_ascii=False)),
        "model_calls": run.model_call_count,
        "answer_input_tokens": answer.input_tokens
        + answer.cache_read_tokens
        + answer.cache_write_tokens,
        # The offline model is free: the answer prompt's price at the answer model's prices
        # (input only: the offline model's output restates every result whatever it was shown).
        "answer_input_cost_usd": cost_usd(
            Usage(
                input_tokens=answer.input_tokens,
                cache_read_tokens=answer.cache_read_tokens,
                cache_write_tokens=answer.cache_write_tokens,
            ),
            prices_for(settings.AGENTSITE_ANSWER_MODEL),
        ),
        "answer_output_tokens": answer.output_tokens,
        "replan_prompt_tokens": replan.estimated_input_tokens(),
        "react_turn_prompt_tokens": react.estimated_input_tokens(),
    }


def main() -> int:
    import os

    with tempfile.TemporaryDirectory() as db_dir:
        os.environ["AGENTSITE_SQLITE_PATH"] = str(Path(db_dir) / "bench.sqlite3")
        os.environ["AGENTSITE_VAR_DIR"] = db_dir
        os.environ["AGENTSITE_TOOL_MODULES"] = "benchmarks.bench_tools"
        os.environ["AGENTSITE_MODEL_BACKEND"] = "offline"
        os.environ["AGENTSITE_DEBUG"] = "0"
        os.environ.setdefault("AGENTSITE_SECRET_KEY", "benchmark-only-" + os.urandom(16).hex())
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        before, after = measure(10**9), measure(None)
    print(f"{'':28}{'whole (before)':>16}{'by reference':>16}{'ratio':>8}")
    keys = ("result_chars", "model_calls", "answer_input_tokens", "answer_output_tokens")
    for key in (*keys, "replan_prompt_tokens", "react_turn_prompt_tokens"):
        ratio = f"{after[key] / before[key]:.3f}" if before[key] else "-"  # type: ignore[operator]
        print(f"{key:28}{before[key]:>16,}{after[key]:>16,}{ratio:>8}")
    cost = "answer_input_cost_usd"
    print(f"{cost:28}{before[cost]:>16.6f}{after[cost]:>16.6f}")
    print(f"prompt limit: {before['limit']:,} chars (before), {after['limit']:,} (after)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
