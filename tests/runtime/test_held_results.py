"""Large results by reference: stored whole, shown to later prompts as an extract, read on by
result_slice within the same run only, and shown whole on the run page and in the audit."""

import json

import pytest
from django.urls import reverse

from plans.models import Run, Step
from plans.runtime.advance import advance_run
from plans.services.runs import run_create
from tests.runtime.test_replanning import plan, step

pytestmark = pytest.mark.django_db(transaction=True)

REPORT = {"rows": 500}  # sales_report: 500 objects, about 205,000 chars of JSON


def run_goal(author, text="Summarise the sales report"):
    run = run_create(author=author, goal_text=text)
    advance_run(run.pk)
    return Run.objects.get(pk=run.pk)


def test_a_200_kb_result_is_stored_whole_and_prompts_get_an_extract_by_reference(
    author, claude_plans
):
    server = claude_plans(
        plan(step(1, "sales_report", REPORT), step(2, "explode", {"message": "ledger down"})),
        plan(
            step(1, "sales_report", REPORT),
            step(2, "result_slice", {"ref": "v1.step1", "path": "[499]"}),
        ),
    )

    run = run_goal(author)

    assert server.purposes == ["plan", "replan", "answer"]
    v1, v2 = run.plans.order_by("version")
    first = Step.objects.get(plan=v1, step_id=1)
    whole = json.dumps(first.result, ensure_ascii=False)
    assert len(first.result) == 500 and len(whole) > 200_000  # stored whole
    replan_prompt, answer_prompt = server.prompts[1], server.prompts[2]
    assert f"result of step 1: {len(whole):,} chars, held whole as ref v1.step1" in replan_prompt
    assert f"result of step 1: {len(whole):,} chars, held whole as ref v2.step1" in answer_prompt
    for prompt in (replan_prompt, answer_prompt):
        assert "shape: list of 500 objects with keys row, region, sku, amount_inr, note" in prompt
        assert whole[:2000] in prompt and whole[:2001] not in prompt  # its first part only
        assert len(prompt) < 12_000
    assert "SKU-00499" not in replan_prompt
    # result_slice is in the catalog only of the replan that holds a result by reference.
    plan_system, replan_system = server.systems[0], server.systems[1]
    assert '"name\\":\\"result_slice' not in plan_system
    assert '"name\\":\\"result_slice' in replan_system
    # The replanned step read the last row, which no prompt had shown; the answer sees it.
    sliced = Step.objects.get(plan=v2, step_id=2)
    assert sliced.status == Step.Status.SUCCEEDED
    assert json.loads(sliced.result["text"])["sku"] == "SKU-00499"
    assert sliced.result["total_chars"] == len(json.dumps(first.result[499]))
    assert "SKU-00499" in answer_prompt


def test_result_slice_reads_on_from_an_offset_with_bounded_output(author, claude_plans):
    claude_plans(
        plan(
            step(1, "sales_report", REPORT),
            step(2, "result_slice", {"ref": "v1.step1", "offset": 2000, "length": 4000}, [1]),
        )
    )

    run = run_goal(author)

    steps = {s.step_id: s for s in Step.objects.filter(plan__run=run)}
    whole = json.dumps(steps[1].result, ensure_ascii=False)
    part = steps[2].result
    assert steps[2].status == Step.Status.SUCCEEDED
    assert part["text"] == whole[2000:6000]
    assert part["next_offset"] == 6000 and part["total_chars"] == len(whole)


def test_a_run_cannot_read_another_runs_result(author, claude_plans):
    claude_plans(plan(step(1, "echo", {"text": "a"}), step(2, "sales_report", REPORT)))
    first = run_goal(author)
    assert Step.objects.get(plan__run=first, step_id=2).status == Step.Status.SUCCEEDED

    # The same reference, from another run: it names that run's own step 2, which it lacks.
    claude_plans(plan(step(1, "result_slice", {"ref": "v1.step2", "path": "[0]"})))
    second = run_goal(author, "Read the other run's report")

    sliced = Step.objects.get(plan__run=second, step_id=1)
    assert sliced.status == Step.Status.FAILED and sliced.result is None
    assert sliced.error == "this run has no step v1.step2 (plan version 1, step 2)"


def test_the_run_page_and_the_audit_show_the_whole_result(author, claude_plans, client):
    claude_plans(plan(step(1, "sales_report", REPORT)))
    run = run_goal(author)
    client.force_login(author)

    for name in ("plans:run_detail", "plans:run_audit"):
        page = client.get(reverse(name, args=[run.pk])).content.decode()
        # The last row is in the page (folded behind "Show all" on the run page).
        assert "SKU-00499" in page and "row 499 ..." in page, name
