"""The three roles as groups: authors submit goals, reviewers decide, operators audit."""

from django.contrib.auth.models import Group, Permission

ROLE_PERMISSIONS = {
    "authors": ["plans.add_goal"],
    "reviewers": ["plans.decide_approval", "plans.view_all_runs"],
    "operators": ["plans.view_all_runs", "plans.view_costs", "plans.manage_webhooks"],
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


def may_submit_goals(user) -> bool:
    """Authors (the group, or anyone granted plans.add_goal) may hand the agent goals."""
    return user.is_authenticated and (
        user.has_perm("plans.add_goal") or user.groups.filter(name="authors").exists()
    )
