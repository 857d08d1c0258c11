from django.contrib.auth import views as auth_views
from django.urls import path
from django.views.generic import RedirectView

from . import views

app_name = "console"
urlpatterns = [
    path("", RedirectView.as_view(pattern_name="console:models"), name="home"),
    path("login/", auth_views.LoginView.as_view(template_name="console/login.html",
                                                redirect_authenticated_user=True), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("models/", views.models_list, name="models"),
    path("models/<str:model_id>/", views.model_detail, name="model"),
    path("models/<str:model_id>/compare/", views.compare, name="compare"),
    path("jobs/", views.jobs_list, name="jobs"),
    path("jobs/live/", views.jobs_fragment, name="jobs-live"),
    path("jobs/<str:job_id>/", views.job_detail, name="job"),
    path("jobs/<str:job_id>/live/", views.job_fragment, name="job-live"),
    path("jobs/<str:job_id>/cancel/", views.job_cancel, name="job-cancel"),
    path("tokens/", views.tokens, name="tokens"),
    path("tokens/<int:token_id>/revoke/", views.token_revoke, name="token-revoke"),
    path("docs/api", views.api_docs, name="api-docs"),
]
