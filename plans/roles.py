"""The three roles as groups: authors submit goals, reviewers decide, operators audit."""

from collections.abc import Collection

from django.conf import settings
from django.contrib.auth.models import Group, Permission, User
from django.db.models import Q

from plans.models import Run

# The permission that makes someone a reviewer: they decide destructive steps and plans.
DECIDE = "plans.decide_approval"

ROLE_PERMISSIONS = {
    "authors": ["plans.add_goal"],
    "reviewers": [DECIDE, "plans.view_all_runs"],
    "operators": [
        "plans.view_all_runs",
        "plans.view_costs",
        "plans.manage_webhooks",
        "plans.add_runreplay",  # replays make model calls (never tool calls) on the run's goal
    ],
}


def roles_ensure() -> dict[str, Group]:
    """Create the role groups with their permissions (idempotent)."""
    groups = {}
    for name, perms in ROLE_PERMISSIONS.items():
        group, _ = Group.objects.get_or_create(name=name)
        for dotted in perms:
            app_label, codename = dotted.split(".")
            group.permissions.add(
                Permission.objects.get(content_type__app_label=app_label, codename=codename)
            )
        groups[name] = group
    return groups


def roles_ensure_group(name: str, *, like: str) -> Group:
    """A group with a role's permissions (a team an approval rule routes to; idempotent)."""
    group, _ = Group.objects.get_or_create(name=name)
    for dotted in ROLE_PERMISSIONS[like]:
        app_label, codename = dotted.split(".")
        group.permissions.add(
            Permission.objects.get(content_type__app_label=app_label, codename=codename)
        )
    return group


def may_submit_goals(user) -> bool:
    """Authors (the group, or anyone granted plans.add_goal) may hand the agent goals.

    Through an API token (plans.api.tokens.scoped_user), only with the authors role on it.
    """
    if not user.is_authenticated:
        return False
    if getattr(user, "api_roles", None) is not None:
        return user.has_perm("plans.add_goal")  # the token's rights, not the groups'
    return user.has_perm("plans.add_goal") or user.groups.filter(name="authors").exists()


def may_decide(user) -> bool:
    """Reviewers (plans.decide_approval, from their group or their own) decide approvals."""
    return bool(user is not None and user.is_authenticated and user.has_perm(DECIDE))


def group_names(user) -> frozenset[str]:
    """The names of the user's groups, read once per user object."""
    names = getattr(user, "_agentsite_group_names", None)
    if names is None:
        names = frozenset(user.groups.values_list("name", flat=True)) if user.pk else frozenset()
        user._agentsite_group_names = names
    return names


def routing_forbids(*, user, groups: Collection[str]) -> bool:
    """Routing: a request an approval rule routed to groups is decided only by their members
    (no groups named: by anyone who may decide)."""
    return bool(groups) and not (group_names(user) & set(groups))


def questions_answerable(user) -> Q:
    """Who may answer an ask_human question, as a filter on questions: the run's author for
    "author", a member of the role's group for a role (a superuser: any role). Through an API
    token, only in the roles it carries (the authors role to answer as the run's author)."""
    if user is None or not user.is_authenticated:
        return Q(pk__in=[])
    token_roles = getattr(user, "api_roles", None)  # plans.api.tokens.scoped_user
    as_author = Q(audience="author", run__goal__author=user)
    if token_roles is not None and "authors" not in token_roles:
        as_author = Q(pk__in=[])
    if user.is_superuser:
        as_member = ~Q(audience="author")
    else:
        as_member = Q(audience__in=sorted(group_names(user)))
    if token_roles is not None:
        as_member &= Q(audience__in=sorted(token_roles))
    return as_author | as_member


# Decisions made by a signed-in person (the pages, the API, an e-mail's link): permission and
# four-eyes apply. The CLI is the operator's own shell and the TTL is the clock.
PEOPLES_CHANNELS = frozenset({"web", "api", "email"})


def four_eyes_forbids(*, run: Run, reviewer: User | None, via: str) -> bool:
    """The four-eyes rule: nobody signed in decides a step or plan of a goal they submitted."""
    return (
        via in PEOPLES_CHANNELS
        and settings.AGENTSITE_FOUR_EYES
        and reviewer is not None
        and run.goal.author_id == reviewer.pk
    )
