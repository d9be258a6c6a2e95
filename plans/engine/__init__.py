"""The plan-and-execute engine: plans, their validation and scheduling. Pure Python, no Django."""

from plans.engine.argschema import check_args, json_type_name
from plans.engine.graph import (
    ancestors,
    critical_path,
    depths,
    descendants,
    find_cycle,
    find_cycles,
    rounds,
    topological_order,
)
from plans.engine.parsing import MAX_PLANNER_OUTPUT_CHARS, parse_planner_output
from plans.engine.plan import MAX_STEP_ID, Plan, PlanInvalid, PlanParseError, PlanStep, Problem
from plans.engine.policies import (
    Budget,
    args_match_sha256,
    args_sha256,
    backoff_delay,
    blocked_result,
    budget_problem,
    canonical_json,
    idempotency_key,
    json_numbers_as_values,
    legacy_args_sha256,
)
from plans.engine.scheduler import Outcome, Scheduler
from plans.engine.substitution import (
    PLACEHOLDER,
    MissingPath,
    Placeholder,
    UnresolvedPlaceholder,
    placeholder_refs,
    placeholders,
    resolve,
)
from plans.engine.text import storable, unstorable_in
from plans.engine.validation import ToolSignature, validate_plan

__all__ = [
    "MAX_PLANNER_OUTPUT_CHARS",
    "MAX_STEP_ID",
    "PLACEHOLDER",
    "Budget",
    "MissingPath",
    "Outcome",
    "Placeholder",
    "Plan",
    "PlanInvalid",
    "PlanParseError",
    "PlanStep",
    "Problem",
    "Scheduler",
    "ToolSignature",
    "UnresolvedPlaceholder",
    "ancestors",
    "args_match_sha256",
    "args_sha256",
    "backoff_delay",
    "blocked_result",
    "budget_problem",
    "canonical_json",
    "check_args",
    "critical_path",
    "depths",
    "descendants",
    "find_cycle",
    "find_cycles",
    "idempotency_key",
    "json_numbers_as_values",
    "json_type_name",
    "legacy_args_sha256",
    "parse_planner_output",
    "placeholder_refs",
    "placeholders",
    "resolve",
    "rounds",
    "storable",
    "topological_order",
    "unstorable_in",
    "validate_plan",
]
