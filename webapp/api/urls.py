from django.urls import path

from . import openapi, views

app_name = "api"
urlpatterns = [
    path("models", views.models, name="models"),
    path("models/<str:model_id>", views.model_detail, name="model-detail"),
    path("jobs", views.jobs, name="jobs"),
    path("jobs/<str:job_id>", views.job_detail, name="job-detail"),
    path("jobs/<str:job_id>/cancel", views.job_cancel, name="job-cancel"),
    path("jobs/<str:job_id>/artifacts/<str:name>", views.job_artifact, name="job-artifact"),
    path("targets", views.targets, name="targets"),
    path("openapi.json", openapi.schema_view, name="openapi"),
]
