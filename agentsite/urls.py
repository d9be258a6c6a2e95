from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", include(("plans.api.urls", "api"))),
    path("accounts/", include("django.contrib.auth.urls")),
    path("", include("plans.urls")),
]
