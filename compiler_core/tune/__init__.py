"""The autotuner, split by role (as TVM's meta_schedule):

    request.py   the tuning request of cc.compile / the CLI (budget, records, threads)
    workload.py  the workload key (driver.kernel_key minus the schedule) and target key
    space.py     the candidate schedules per node (kernels/schedule.SPACES), neighbours
    builder.py   candidates -> one shared library of kernels (codegen/standalone.py)
    runner.py    times a batch in a child process (measure_child.py) with time limits;
                 crashes, hangs and wrong results are recorded as failures
    records.py   the records store (JSON lines here; a database table in the service)
    search.py    which candidates to measure next
    tuner.py     tune_graph: the budget spent over the kernels by their share of the time
"""
from .records import RecordStore, RecordsError
from .request import TuningRequest, parse_tuning
from .tuner import Tuner, tune_graph

__all__ = ["RecordStore", "RecordsError", "Tuner", "TuningRequest", "parse_tuning",
           "tune_graph"]
