from django.urls import path

from plans.views import approvals, costs, evals, forks, goals, questions, runs

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
    path("costs/", costs.costs, name="costs"),
    path("evals/", evals.evals, name="evals"),
]
