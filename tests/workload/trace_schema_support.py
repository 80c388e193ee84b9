"""What the span schema tests share (test_trace_schema_*.py): the
environment of a run directory (COLLAPSAR_TRACE_DIR, service, instance and
run id), a wl-client started with it and finished with its sanitizer report
checked, and waiting for a condition with a deadline."""

import subprocess
import time

from wl_support import sanitizer_env

RUN_ID = "run-42"


def run_env(tmp_path, service, instance):
    return {
        "COLLAPSAR_TRACE_DIR": str(tmp_path / "run"),
        "COLLAPSAR_SERVICE": service,
        "COLLAPSAR_INSTANCE": instance,
        "COLLAPSAR_RUN_ID": RUN_ID,
    }


def start_client(binaries, *args, env=None):
    return subprocess.Popen(
        [str(binaries["client"]), *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**sanitizer_env(), **(env or {})},
        umask=0o022,
    )


def finish(proc, timeout=120):
    out, err = proc.communicate(timeout=timeout)
    assert "Sanitizer" not in err and "runtime error" not in err, err
    return proc.returncode, out, err


def wait_for(predicate, what, timeout=20):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
