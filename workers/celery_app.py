"""The worker's view of the Celery app (`celery -A workers.celery_app worker`): the app of
webapp/celery.py plus what only workers need: the task modules, the periodic reaper, the
queues of the targets this machine benchmarks, and the fleet heartbeat."""
from __future__ import annotations

from celery.signals import celeryd_after_setup, worker_ready, worker_shutdown
from django.conf import settings

from webapp.celery import REAP_STALE_JOBS, app
from webapp.jobs import fleet

from . import heartbeat

app.conf.update(
    imports=["workers.tasks"],
    beat_schedule={"reap-stale-jobs": {"task": REAP_STALE_JOBS,
                                       "schedule": settings.REAPER_INTERVAL}},
)
_beating: list[heartbeat.Heartbeat] = []


@celeryd_after_setup.connect
def consume_target_queues(sender, instance, **kwargs):
    """Besides the base queue (-Q), the queue of each target this CPU runs natively."""
    for target in heartbeat.benchmark_targets():
        instance.app.amqp.queues.select_add(fleet.queue_name(target))


@worker_ready.connect
def start_heartbeat(sender, **kwargs):
    _beating.append(heartbeat.Heartbeat(sender.hostname))
    _beating[-1].start()


@worker_shutdown.connect
def stop_heartbeat(sender, **kwargs):
    while _beating:
        _beating.pop().stop()
