"""Websocket routes (served under the same origin checks and session auth as the pages)."""

from django.urls import path

from plans.consumers import PendingApprovalsConsumer, RunConsumer

websocket_urlpatterns = [
    path("ws/runs/<int:run_id>/", RunConsumer.as_asgi()),
    path("ws/approvals/", PendingApprovalsConsumer.as_asgi()),
]
