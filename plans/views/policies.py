"""/policies/: the approval rules in force, read-only, with how often each has matched."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.exceptions import ImproperlyConfigured, PermissionDenied
from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from plans.guards.approval_rules import rule_modules, rules_check, rules_load
from plans.roles import may_decide
from plans.selectors.approvals import rule_match_counts
from plans.views.params import SignedInRequest


@login_required
@require_GET
def policies(request: SignedInRequest) -> HttpResponse:
    """The rules in the order they are tried; each with its matches by version and decision.

    For reviewers and operators: an author who knew them could shape requests to fit them.
    """
    if not (may_decide(request.user) or request.user.has_perm("plans.view_all_runs")):
        raise PermissionDenied
    error = ""
    try:
        rules = rules_load()
    except ImproperlyConfigured as exc:
        rules, error = [], str(exc)
    counts = rule_match_counts()
    active = {one.name for one in rules}
    context = {
        "modules": rule_modules(),
        "rules": [
            {
                "rule": one,
                "tools": sorted(one.tools),
                "counted": counts.get(one.name),
                "this_version": counts[one.name].versions.get(one.version, 0)
                if one.name in counts
                else 0,
            }
            for one in rules
        ],
        "retired": [(name, counted) for name, counted in counts.items() if name not in active],
        "error": error,
        "problems": rules_check(rules) if rules else [],
    }
    return render(request, "plans/policies.html", context)
