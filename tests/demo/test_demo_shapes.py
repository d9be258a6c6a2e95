"""One source of demo plans: the seeder's runs have the offline planner's plans for their goals,
and whether a step is destructive comes from the tool registry."""

import pytest

from plans.demo.seeding import runs_seed
from plans.llm.offline import plan_for_goal
from plans.models import Run, Step
from plans.tools import get_registry

pytestmark = pytest.mark.django_db


def test_seeded_runs_have_the_offline_planners_plan_for_their_goal():
    runs_seed(count=40, authors=2, seed=3)
    registry = get_registry()
    compared = set()

    for run in Run.objects.exclude(status="invalid_plan").select_related("goal"):
        steps = list(Step.objects.filter(plan__run=run).order_by("step_id"))
        assert all(step.destructive == registry[step.tool].destructive for step in steps)
        goal = run.goal.text
        if goal.startswith(("Refund order", "Book a trip")):
            planned = plan_for_goal(goal)["steps"]
            seeded = [
                {"id": s.step_id, "tool": s.tool, "args": s.args, "depends_on": s.depends_on}
                for s in steps
            ]
            assert seeded == planned, goal
            compared.add(goal.split()[0])

    assert compared == {"Refund", "Book"}
