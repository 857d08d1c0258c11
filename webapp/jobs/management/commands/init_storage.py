"""`python manage.py init_storage`: create the S3 bucket if it does not exist (idempotent)."""
from django.conf import settings
from django.core.management.base import BaseCommand

from webapp.jobs import storage


class Command(BaseCommand):
    help = "Create the artifact bucket (S3_BUCKET) if it does not exist."

    def handle(self, *args, **options):
        storage.ensure_bucket()
        self.stdout.write(f"bucket {settings.S3_BUCKET} ready at {settings.S3_ENDPOINT_URL}")
