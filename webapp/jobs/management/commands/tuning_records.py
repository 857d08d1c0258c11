"""`python manage.py tuning_records export FILE [--target KEY]` / `import FILE...`: the
shared tuning records table to and from the JSON-lines files of
`python -m compiler_core records`, so records travel between deployments and laptops."""
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from compiler_core.tune.records import RecordsError
from webapp.jobs.tuning_records import export_records, import_records


class Command(BaseCommand):
    help = "Export the tuning records table to a JSON-lines file, or import files into it."

    def add_arguments(self, parser):
        parser.add_argument("action", choices=["export", "import"])
        parser.add_argument("files", nargs="+")
        parser.add_argument("--target", help="export: only this target key")

    def handle(self, *args, action, files, target, **options):
        if action == "export":
            if len(files) != 1:
                raise CommandError("export writes one file")
            count = export_records(Path(files[0]), target)
            self.stdout.write(f"exported {count} records to {files[0]}")
            return
        try:
            for name in files:
                added = import_records(Path(name))
                self.stdout.write(f"imported {added} new records from {name}")
        except RecordsError as exc:
            raise CommandError(str(exc)) from None
