from django.apps import AppConfig


class PlansConfig(AppConfig):
    name = "plans"
    verbose_name = "Plans and runs"

    def ready(self) -> None:
        from django.contrib.auth.signals import user_logged_out

        from plans import checks  # noqa: F401  (registers the system checks)
        from plans.events import group_send, user_group

        def close_sockets_on_logout(sender, request, user, **kwargs) -> None:
            if user is not None:
                group_send(user_group(user.pk), {"type": "session.ended"})

        user_logged_out.connect(close_sockets_on_logout, dispatch_uid="plans.logout_sockets")
