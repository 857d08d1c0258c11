"""Which workload the tuner measures next: the one with the most estimated model time per
trial, an untimed kernel's guess calibrated by the timed kernels of its own op."""
from compiler_core.codegen.target_machine import host_spec
from compiler_core.tune import RecordStore, Tuner, TuningRequest
from compiler_core.tune.runner import Measurement

from .test_tune_search import gemm_workload


def workload(op: str, guess: float, default: float | None = None):
    """A workload whose default, when given, took `default` seconds in one batch."""
    w = gemm_workload()
    w.nodes[0].op, w.guess = op, guess
    if default is not None:
        w.tried[w.space[0]] = Measurement(w.space[0], default)
        w.trials = 8
    return w


def pick(tmp_path, workloads):
    tuner = Tuner(TuningRequest(trials=100), host_spec(), 3, RecordStore(tmp_path / "r.jsonl"))
    tuner.workloads = workloads
    return tuner._pick()


def test_an_op_never_timed_has_its_biggest_kernel_timed_first(tmp_path):
    conv = workload("Conv", 1e-3, default=1e-3)
    small, big = workload("DepthwiseConv", 1e-6), workload("DepthwiseConv", 2e-6)
    assert pick(tmp_path, [conv, small, big]) is big


def test_untimed_kernels_are_calibrated_by_their_own_ops_timings(tmp_path):
    """Convs ran as guessed, the depthwise conv 5x slower: the untimed depthwise conv's
    guess is worth 5x its face value (over every op, the median ratio would be 1)."""
    convs = [workload("Conv", 1e-3, default=1e-3) for _ in range(2)]
    timed = workload("DepthwiseConv", 1e-4, default=5e-4)
    untimed = workload("DepthwiseConv", 1.5e-4)
    assert pick(tmp_path, [*convs, timed, untimed]) is untimed
    # a Conv timed 5x slower than guessed instead: the Conv leads
    convs[0].tried[convs[0].space[0]] = Measurement(convs[0].space[0], 5e-3)
    timed.tried[timed.space[0]] = Measurement(timed.space[0], 1e-4)
    assert pick(tmp_path, [*convs, timed, untimed]) is convs[0]
