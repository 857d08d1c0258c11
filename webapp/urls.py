from django.contrib import admin
from django.urls import include, path

from webapp.api.health import healthz
from webapp.api.views import api

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("admin/", admin.site.urls),
    path("api/v1/", api.urls),
    path("", include(("webapp.console.urls", "console"))),
]
