"""The reads every edge shares: a run's events after a seq, and the steps that fed an approval."""

import pytest

from plans.journal.events import event_message
from plans.models import Approval, Step
from plans.selectors.approvals import approval_inputs
from plans.selectors.runs import run_events_after
from tests.services.test_approvals import start_refund

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_runs_events_after_a_seq_come_in_order_as_they_were_published(author):
    run = start_refund(author)

    after = run_events_after(run, 3)

    assert [e["seq"] for e in after] == list(range(4, run.last_seq + 1))
    assert after == [event_message(e) for e in run.events.filter(seq__gt=3)]
    assert run_events_after(run.pk, 3) == after  # by id, as the socket and the stream ask
    assert run_events_after(run, run.last_seq) == []


def test_an_approvals_inputs_are_its_steps_dependencies(author):
    run = start_refund(author)
    approval = Approval.objects.select_related("step").get(run=run)

    inputs = approval_inputs([approval])

    assert inputs == {approval.pk: [Step.objects.get(plan__run=run, step_id=1)]}
    assert approval_inputs([]) == {}
