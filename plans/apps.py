from django.apps import AppConfig


class PlansConfig(AppConfig):
    name = "plans"
    verbose_name = "Plans and runs"
