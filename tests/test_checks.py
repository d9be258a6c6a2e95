"""Start-up checks of the settings."""

from django.core import checks

from plans.checks import check_models_are_priced, check_parallel_steps


def test_the_check_runs_at_start_up_and_passes_the_default_settings():
    assert check_models_are_priced in checks.registry.registry.get_checks()
    assert check_models_are_priced() == []


def test_a_planner_model_without_prices_is_reported_at_start_up(settings):
    settings.AGENTSITE_MODEL_BACKEND = "anthropic"
    settings.AGENTSITE_PLANNER_MODEL = "claude-sonet-typo"

    [error] = check_models_are_priced()

    assert error.id == "plans.E001"
    assert "no prices configured for model 'claude-sonet-typo'" in error.msg
    assert "AGENTSITE_PLANNER_MODEL" in error.hint


def test_a_run_allowed_no_steps_at_a_time_is_reported_at_start_up(settings):
    settings.AGENTSITE_MAX_PARALLEL_STEPS = 0

    [error] = check_parallel_steps()

    assert error.id == "plans.E002"
    assert "AGENTSITE_MAX_PARALLEL_STEPS is 0" in error.msg


def test_a_mistyped_plan_schema_mode_is_reported_at_start_up(settings):
    from plans.checks import check_plan_schema_mode

    assert check_plan_schema_mode() == []
    settings.AGENTSITE_PLAN_SCHEMA = "strict"

    [error] = check_plan_schema_mode()

    assert error.id == "plans.E003"
    assert "AGENTSITE_PLAN_SCHEMA is 'strict'" in error.msg


def test_approval_rule_modules_that_cannot_be_loaded_are_reported_at_start_up(settings):
    from plans.checks import check_approval_rules

    assert check_approval_rules() == []
    settings.AGENTSITE_APPROVAL_RULE_MODULES = ["tests.rule_modules.nope"]

    [error] = check_approval_rules()

    assert error.id == "plans.E020"
    assert "cannot import 'tests.rule_modules.nope'" in error.msg
