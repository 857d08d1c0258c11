"""Celery workers: thin tasks that take ids and call compiler_core in sandboxed children."""
