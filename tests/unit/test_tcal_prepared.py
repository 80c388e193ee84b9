"""PreparedStep without a kernel (records, the wait) and the
scheduler preparing steps ahead of their time.  tests/kernel/test_prepared_step.py
covers netlink and signals."""

import threading
import time

import pytest

from collapsar.manager.play.scheduler import (
    LEAD_HISTORY,
    MAX_LEAD_NS,
    MIN_LEARNED_WEIGHT,
    NS_PER_WEIGHT,
    Scheduler,
)
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


def test_a_heavy_step_is_prepared_twice_its_predicted_time_ahead():
    scheduler = Scheduler([], prepare_ahead_ns=20_000_000, realtime=False)
    assert scheduler.lead_ns(500) == 20_000_000  # light: the base lead
    assert scheduler.lead_ns(30_000) == 2 * 30_000 * NS_PER_WEIGHT  # before anything is learned
    scheduler._learn(10_000, 40_000_000)  # this host prepared 4 ns per unit of weight
    assert scheduler.lead_ns(10_000) == 80_000_000
    scheduler._learn(MIN_LEARNED_WEIGHT - 1, 1_000_000)  # too light to learn a ratio from
    assert scheduler.lead_ns(20_000) == 160_000_000
    assert scheduler.lead_ns(10**6) == MAX_LEAD_NS


def test_run_wakes_a_step_by_its_weight():
    class Recording(Scheduler):
        def _wait_until(self, deadline_ns: int) -> bool:
            self.waits.append(deadline_ns)
            return True  # t0 = 0 on the monotonic clock: every deadline is long past

    scheduler = Recording(
        [(600_000, "light", lambda: None), (300_000, "heavy", lambda: None)],  # weights go by entry, not time
        prepare_ahead_ns=20_000_000,
        realtime=False,
        weights=[0, 20_000],  # the heavy one, predicted at 20,000 x NS_PER_WEIGHT: prepared twice that ahead
    )
    scheduler.waits = []
    scheduler.run(0)
    assert scheduler.waits[0] == 300_000_000 - 2 * 20_000 * NS_PER_WEIGHT
    # the heavy step's preparation (its planned wake to sealed, on the real
    # clock: huge) says how long heavy steps take, not when light ones wake
    assert scheduler.waits[1] == 600_000_000 - 20_000_000
    assert (len(scheduler._ns_per_weight), len(scheduler._preparations)) == (1, 1)  # one of each kind


def test_a_heavy_step_too_close_behind_another_is_prepared_with_it_before_either_fires():
    prepared_at = {}
    t0 = time.monotonic_ns()

    def step(name, seconds):
        def callback():
            time.sleep(seconds)
            prepared_at[name] = (time.monotonic_ns() - t0) // 1000

        return callback

    # The heavy step's predicted preparation (60,000 x 2.5 us = 150 ms) is
    # more than the 100 ms between the two: prepared after the light one
    # fired, it would be 50 ms late.
    scheduler = Scheduler(
        [(300_000, "light", step("light", 0.001)), (400_000, "heavy", step("heavy", 0.15))],
        prepare_ahead_ns=20_000_000,
        realtime=False,
        weights=[100, 60_000],
    )
    group, wake_ns = scheduler.group(0, t0)
    assert group == [0, 1] and wake_ns == t0 + 300_000_000 - 20_000_000 - MAX_LEAD_NS
    log = scheduler.run(t0)
    assert [f.label for f in log] == ["light", "heavy"]
    assert prepared_at["heavy"] < 300_000  # before the light one fired
    assert log[0].started_us >= 300_000 and log[1].started_us >= 400_000
    assert log[1].lateness_us < 30_000, log  # on time, give or take this host's wake-ups
    # Far enough apart, each step is prepared on its own.
    apart = Scheduler(
        [(300_000, "light", lambda: None), (900_000, "heavy", lambda: None)],
        prepare_ahead_ns=20_000_000,
        realtime=False,
        weights=[100, 60_000],
    )
    assert apart.group(0, 0) == ([0], 280_000_000)
    assert apart.group(1, 0) == ([1], 900_000_000 - MAX_LEAD_NS)  # twice 150 ms, capped
