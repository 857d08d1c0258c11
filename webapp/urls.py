from django.urls import include, path

from webapp.api.health import healthz

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("api/v1/", include("webapp.api.urls")),
    path("", include(("webapp.console.urls", "console"))),
]
