"""Operator views of models, jobs and their results (the console is the user-facing UI)."""
from django.contrib import admin

from .models import Artifact, BenchmarkResult, CompileJob, UploadedModel


@admin.register(UploadedModel)
class UploadedModelAdmin(admin.ModelAdmin):
    list_display = ("name", "owner", "opset", "size", "created_at")
    list_filter = ("opset",)
    search_fields = ("name", "sha256", "owner__username")
    readonly_fields = ("id", "sha256", "size", "storage_key", "created_at")


class ArtifactInline(admin.TabularInline):
    model = Artifact
    extra = 0
    readonly_fields = ("name", "size", "sha256", "storage_key", "created_at")


@admin.register(CompileJob)
class CompileJobAdmin(admin.ModelAdmin):
    list_display = ("id", "owner", "model", "target", "state", "stage", "attempts", "worker",
                    "created_at")
    list_filter = ("state", "target")
    search_fields = ("id", "owner__username", "model__name", "worker")
    readonly_fields = ("id", "created_at", "started_at", "finished_at", "heartbeat_at",
                       "task_id", "log")
    inlines = [ArtifactInline]


@admin.register(BenchmarkResult)
class BenchmarkResultAdmin(admin.ModelAdmin):
    list_display = ("job", "runtime", "threads", "created_at")
    exclude = ("samples_ms",)
