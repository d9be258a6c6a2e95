from django.urls import path

from plans.views import (
    account,
    approvals,
    costs,
    email_decisions,
    evals,
    forks,
    goals,
    questions,
    runs,
    webhooks,
)

app_name = "plans"
urlpatterns = [
    path("", goals.new_goal, name="new_goal"),
    path("runs/", runs.run_list, name="run_list"),
    path("runs/<int:run_id>/", goals.run_detail, name="run_detail"),
    path("runs/<int:run_id>/graph.svg", runs.run_graph_svg, name="run_graph_svg"),
    path("runs/<int:run_id>/steps/<int:step_id>/", goals.step_detail, name="step_detail"),
    path("runs/<int:run_id>/cancel/", goals.run_cancel_view, name="run_cancel"),
    path("runs/<int:run_id>/plan/decide/", goals.plan_decide_view, name="plan_decide"),
    path("runs/<int:run_id>/events/", goals.run_events, name="run_events"),
    path("runs/<int:run_id>/again/", forks.run_again, name="run_again"),
    path("runs/<int:run_id>/fork/", forks.fork, name="run_fork"),
    path("runs/<int:run_id>/fork/check/", forks.fork_check, name="run_fork_check"),
    path("runs/<int:run_id>/audit/", runs.run_audit, name="run_audit"),
    path("runs/<int:run_id>/export.json", runs.run_export, name="run_export"),
    path("approvals/", approvals.inbox, name="inbox"),
    path("approvals/decide/", approvals.decide, name="decide"),
    path("questions/<int:question_id>/answer/", questions.answer, name="question_answer"),
    path("approvals/count/", approvals.pending_count, name="pending_count"),
    path("approvals/by-email/<str:token>/", email_decisions.email_decision, name="email_decision"),
    path("costs/", costs.costs, name="costs"),
    path("evals/", evals.evals, name="evals"),
    path("settings/", account.settings_page, name="settings"),
    path("settings/tokens/", account.token_create_view, name="token_create"),
    path("settings/tokens/<int:token_id>/revoke/", account.token_revoke_view, name="token_revoke"),
    path("settings/notifications/", account.preferences_view, name="preferences"),
    path("webhooks/", webhooks.webhooks, name="webhooks"),
    path("webhooks/endpoints/", webhooks.endpoint_create, name="webhook_create"),
    path(
        "webhooks/endpoints/<int:endpoint_id>/toggle/",
        webhooks.endpoint_toggle,
        name="webhook_toggle",
    ),
    path(
        "webhooks/deliveries/<int:delivery_id>/resend/",
        webhooks.delivery_resend_view,
        name="webhook_resend",
    ),
]
