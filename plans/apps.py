from django.apps import AppConfig


class PlansConfig(AppConfig):
    name = "plans"
    verbose_name = "Plans and runs"

    def ready(self) -> None:
        from django.conf import settings
        from django.contrib.auth.signals import user_logged_out
        from django.db import transaction
        from django.db.models.signals import post_save

        # Why here, not at the top: an AppConfig is imported before the models are loaded.
        from plans import checks  # noqa: F401  (registers the system checks)
        from plans.journal.events import group_send, user_group
        from plans.journal.tasks import executor_bind
        from plans.mcp import McpToolSource
        from plans.notifications.dispatch import install as install_notifier
        from plans.runtime.advance import advance_run
        from plans.runtime.previews import preview_for_edit
        from plans.services.approvals import edit_previewer_bind
        from plans.tools import add_tool_source
        from plans.tracing import tracing_start_if_configured

        def close_sockets_on_logout(sender, request, user, **kwargs) -> None:
            if user is not None:
                group_send(user_group(user.pk), {"type": "session.ended"})

        def recheck_sockets_on_user_save(sender, instance, created, update_fields, **kwargs):
            # A new password (changed in another session) or a deactivation ends sessions without
            # a logout: the user's sockets re-verify theirs now, not at their next periodic check.
            if created or (
                update_fields is not None and not {"password", "is_active"} & update_fields
            ):
                return
            message = {"type": "session.changed"}
            transaction.on_commit(lambda: group_send(user_group(instance.pk), message))

        add_tool_source(McpToolSource())
        # The task (in the journal, which services queue runs through) runs the executor.
        executor_bind(advance_run)
        # Likewise the approvals service takes an edit's preview on the worker side's threads.
        edit_previewer_bind(preview_for_edit)
        tracing_start_if_configured()
        install_notifier()
        user_logged_out.connect(close_sockets_on_logout, dispatch_uid="plans.logout_sockets")
        post_save.connect(
            recheck_sockets_on_user_save,
            sender=settings.AUTH_USER_MODEL,
            dispatch_uid="plans.user_saved_sockets",
        )
