"""PreparedStep without a kernel (records, the wait) and the
scheduler preparing steps ahead of their time.  tests/kernel/test_prepared_step.py
covers netlink and signals."""

import threading
import time

import pytest

from collapsar.manager.play.scheduler import LEAD_HISTORY, MAX_LEAD_NS, Scheduler
from collapsar.tcal.prepared import PreparedStep


def test_records_run_after_the_deadline_and_a_failing_one_does_not_stop_the_rest():
    order = []

    def failing():
        order.append("record 1")
        raise RuntimeError("meter gone")

    deadline = time.monotonic_ns() + 30_000_000
    with PreparedStep(deadline) as step:
        assert PreparedStep.current() is step
        step.record(failing)
        step.record(lambda: order.append(("record 2", time.monotonic_ns())))
    assert PreparedStep.current() is None and order == []  # nothing before the deadline
    started, applied, errors = step.fire()
    assert order[0] == "record 1" and order[1][0] == "record 2" and order[1][1] >= deadline
    assert [str(e) for e in errors] == ["meter gone"]
    assert deadline <= started == applied  # nothing for the kernel: in force when the wait ends


def test_steps_nest_and_the_outer_one_comes_back():
    with PreparedStep(0) as outer:
        with PreparedStep(0) as inner:
            assert PreparedStep.current() is inner
        assert PreparedStep.current() is outer
    assert PreparedStep.current() is None


def test_scheduler_prepares_ahead_and_fires_at_the_deadline():
    seen = {}

    def step():
        seen["prepared"] = time.monotonic_ns()
        PreparedStep.current().record(lambda: seen.setdefault("in force", time.monotonic_ns()))

    # A lead far above a step's preparation: a host that wakes a thread tens
    # of ms late still prepares it before its time.
    scheduler = Scheduler([(250_000, "e", step)], prepare_ahead_ns=200_000_000, realtime=False)
    t0 = time.monotonic_ns()
    (fired,) = scheduler.run(t0)
    deadline = t0 + 250_000_000
    assert deadline - 200_000_000 <= seen["prepared"] < deadline
    assert seen["in force"] >= deadline
    assert fired.prepared_us < fired.scheduled_us <= fired.started_us <= fired.applied_us
    assert fired.as_dict()["prepared_us"] == fired.prepared_us


def test_scheduler_holds_the_lock_from_preparation_to_firing():
    lock = threading.Lock()
    held = []

    def step():
        PreparedStep.current().record(lambda: held.append(lock.locked()))
        held.append(lock.locked())

    Scheduler([(0, "e", step)], hold=lock, realtime=False).run(time.monotonic_ns())
    assert held == [True, True] and not lock.locked()


def test_a_sealed_step_takes_nothing_more():
    with PreparedStep(0) as step:
        step.signal(999_999, 0)
    step.seal()
    with pytest.raises(RuntimeError, match="sealed"):
        step.signal(999_998, 0)
    step.record(lambda: None)  # bookkeeping after the instant is still welcome


def test_the_lead_grows_to_twice_a_slow_preparation_and_shrinks_back():
    scheduler = Scheduler([], prepare_ahead_ns=20_000_000, realtime=False)
    assert scheduler.lead_ns() == 20_000_000
    scheduler._preparations.append(30_000_000)  # what run() records per step
    assert scheduler.lead_ns() == 60_000_000
    scheduler._preparations.append(200_000_000)
    assert scheduler.lead_ns() == MAX_LEAD_NS
    for _ in range(LEAD_HISTORY):
        scheduler._preparations.append(1_000_000)
    assert scheduler.lead_ns() == 20_000_000
    assert Scheduler([], realtime=False).lead_ns() == 0  # not prepared ahead: at the deadline


def test_run_measures_preparation_from_the_planned_wake():
    now = [0]
    scheduler = Scheduler(
        [(100_000, "e", lambda: now.__setitem__(0, now[0] + 50_000_000))],
        clock_ns=lambda: now[0],
        prepare_ahead_ns=20_000_000,
        realtime=False,
    )
    now[0] = 200_000_000  # woke 120 ms after the planned wake (80 ms): late host
    scheduler.run(0)
    # planned wake 80 ms; preparation ended at 250 ms (after the callback's 50 ms)
    assert list(scheduler._preparations) == [170_000_000]
    assert scheduler.lead_ns() == MAX_LEAD_NS
