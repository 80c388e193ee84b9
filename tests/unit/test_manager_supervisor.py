"""The supervisor with real processes (no namespaces: the argv prefix is
empty here; the kernel tier covers `ip netns exec`)."""

import os
import signal
import sys
import time

import pytest

from collapsar.errors import RunError
from collapsar.manager.local.supervisor import Launch, Supervisor


@pytest.fixture
def sup(tmp_path):
    started = []

    def logs(instance):
        return tmp_path / f"{instance}.out", tmp_path / f"{instance}.err"

    s = Supervisor(
        logs, prefix=lambda inst: [], on_start=lambda inst, pid, st: started.append((inst, pid, st)), grace_s=0.3
    )
    s.started = started
    s.tmp = tmp_path
    yield s
    s.stop_all(0.1)


def wait_exits(sup, n, timeout=5.0):
    deadline = time.monotonic() + timeout
    while len(sup.exits) < n and time.monotonic() < deadline:
        sup.poll()
        time.sleep(0.01)
    return sup.exits


def test_output_env_and_cwd_are_per_instance(sup):
    code = "import os,sys; print(os.environ['X'], os.getcwd()); print('oops', file=sys.stderr)"
    pid = sup.start(Launch("web", (sys.executable, "-c", code), {"X": "hello"}, str(sup.tmp)))
    assert sup.started[0][:2] == ("web", pid) and sup.started[0][2] > 0
    (exit_,) = wait_exits(sup, 1)
    assert (exit_.instance, exit_.returncode, exit_.how) == ("web", 0, "exited")
    assert (sup.tmp / "web.out").read_text() == f"hello {sup.tmp}\n"
    assert (sup.tmp / "web.err").read_text() == "oops\n"


def test_leave_is_sigterm_first(sup):
    sup.start(Launch("a", ("sleep", "30")))
    sup.stop("a")
    (exit_,) = wait_exits(sup, 1)
    assert exit_.returncode == -signal.SIGTERM and exit_.how == "stopped"


def test_leave_escalates_to_sigkill_after_the_grace_period(sup):
    code = (
        "import signal,time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(30)"
    )
    sup.start(Launch("stubborn", (sys.executable, "-c", code)))
    while "ready" not in (sup.tmp / "stubborn.out").read_text():
        time.sleep(0.01)
    began = time.monotonic()
    sup.stop("stubborn")
    (exit_,) = wait_exits(sup, 1)
    assert exit_.returncode == -signal.SIGKILL
    assert 0.25 < time.monotonic() - began < 2.0


def test_crash_is_sigkill_of_the_whole_group(sup):
    code = "import subprocess,time; p=subprocess.Popen(['sleep','30']); print(p.pid, flush=True); time.sleep(30)"
    sup.start(Launch("c", (sys.executable, "-c", code)))
    while not (sup.tmp / "c.out").read_text().strip():
        time.sleep(0.01)
    child = int((sup.tmp / "c.out").read_text())
    sup.kill("c")
    (exit_,) = wait_exits(sup, 1)
    assert exit_.returncode == -signal.SIGKILL and exit_.how == "crashed"
    deadline = time.monotonic() + 2
    while os.path.exists(f"/proc/{child}") and time.monotonic() < deadline:
        time.sleep(0.01)
    state = open(f"/proc/{child}/stat").read().split()[2] if os.path.exists(f"/proc/{child}") else "gone"
    assert state in ("gone", "Z")  # the grandchild died too (a zombie until init reaps it)


def test_bad_command_is_a_run_error(sup):
    with pytest.raises(RunError, match="instance x: cannot start '/nonexistent/prog'"):
        sup.start(Launch("x", ("/nonexistent/prog",)))
    with pytest.raises(RunError, match="instance y: no command"):
        sup.start(Launch("y", ()))


def test_stop_all_reaps_everything(sup):
    for name in ("a", "b", "c"):
        sup.start(Launch(name, ("sleep", "30")))
    exits = sup.stop_all(1.0)
    assert sorted(e.instance for e in exits) == ["a", "b", "c"]
    assert sup.running() == []


def test_rejoin_within_the_grace_period_replaces_the_old_process(sup):
    code = (
        "import signal,time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(30)"
    )
    first = sup.start(Launch("w", (sys.executable, "-c", code)))
    while "ready" not in (sup.tmp / "w.out").read_text():
        time.sleep(0.01)
    sup.stop("w")  # ignored SIGTERM: still running within its grace period
    sup.finish_now("w")
    assert [(e.pid, e.returncode, e.how) for e in sup.exits] == [(first, -signal.SIGKILL, "stopped")]
    second = sup.start(Launch("w", ("sleep", "30")))
    assert second != first and sup.running() == ["w"]


def test_a_failed_exit_the_runtime_explains_takes_its_cause(tmp_path):
    """`ended_by` (the OOM killer's count, limits.py) names a cause only for a
    command that failed on its own: not for a success, nor for a leave."""

    def logs(instance):
        return tmp_path / f"{instance}.out", tmp_path / f"{instance}.err"

    sup = Supervisor(logs, lambda inst: [], lambda inst, pid, st: None, 0.3, ended_by=lambda inst: "oom-killed")
    try:
        sup.start(Launch("hog", ("sh", "-c", "kill -9 $$")))
        sup.start(Launch("fine", ("true",)))
        sup.start(Launch("left", ("sleep", "30")))
        sup.stop("left")
        exits = {e.instance: (e.returncode, e.how) for e in wait_exits(sup, 3)}
        assert exits == {
            "hog": (-signal.SIGKILL, "oom-killed"),
            "fine": (0, "exited"),
            "left": (-signal.SIGTERM, "stopped"),
        }
    finally:
        sup.stop_all(0.1)
        sup.close()
