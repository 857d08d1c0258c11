"""`python manage.py create_api_token USERNAME`: create the user if needed, print a token."""
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from webapp.accounts.models import ApiToken


class Command(BaseCommand):
    help = "Create USERNAME if needed and print a new API token for it."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--name", default="cli", help="a label for the token")

    def handle(self, *args, username, name, **options):
        user, created = get_user_model().objects.get_or_create(username=username)
        if created:
            user.set_unusable_password()
            user.save()
            self.stderr.write(f"created user {username!r} (no password; set one with "
                              "`manage.py changepassword`)")
        _, raw = ApiToken.issue(user, name)
        self.stdout.write(raw)
