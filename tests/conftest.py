"""Shared fixtures: named users, and runs that execute in-process."""

import pytest


@pytest.fixture
def author(django_user_model):
    return django_user_model.objects.create_user("alice", password="alice-pass-123")


@pytest.fixture
def other_author(django_user_model):
    return django_user_model.objects.create_user("carol", password="carol-pass-123")


@pytest.fixture
def reviewer(django_user_model):
    from tests.reviewing import decider

    return decider(django_user_model, "bob", password="bob-pass-123")


@pytest.fixture
def outsider(django_user_model):
    return django_user_model.objects.create_user("mallory", password="mallory-pass-123")


@pytest.fixture
def operator(django_user_model):
    """Sees every run and the costs page (the operators role's permissions)."""
    from django.contrib.auth.models import Permission

    user = django_user_model.objects.create_user("olivia", password="olivia-pass-123")
    user.user_permissions.add(
        *Permission.objects.filter(codename__in=["view_all_runs", "view_costs"])
    )
    return django_user_model.objects.get(pk=user.pk)  # fresh permission cache


@pytest.fixture(autouse=True)
def tasks_run_inline(settings):
    """Tasks run in the enqueuing thread unless a test starts real workers."""
    settings.TASKS = {"default": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend"}}


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def fresh_circuit_cache():
    """Breaker state lives in the database; the per-process cache must not leak across tests."""
    from plans.guards.circuits import reset_cache

    reset_cache()


@pytest.fixture(autouse=True)
def fresh_tool_registry():
    """Each test sees the registry its settings describe."""
    from plans.tools import reset_registry

    reset_registry()
    yield
    reset_registry()


@pytest.fixture(autouse=True)
def notifications_off(settings):
    """The notifier's thread stays out of tests that do not ask for it (tests/notifications)."""
    settings.AGENTSITE_NOTIFICATIONS = False


@pytest.fixture(autouse=True)
def offline_prompt_cache_cleared():
    """Each test starts with the offline model's prompt cache cold, as a fresh process does."""
    from plans.llm.offline import PROMPT_CACHE

    PROMPT_CACHE.clear()
