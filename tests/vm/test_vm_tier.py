"""Host side of the VM tier: boot ONE stock-kernel VM and run `pytest tests/vm` in it.

A VM start costs about a minute under software emulation, so the whole tier
shares one.  The inner run (tests/vm/inner_run.py) writes a JUnit XML per
attempt and its log to artifacts/vm/ (shared read-write with the guest): a
failed inner test is tried again, up to RETRIES more times, in a fresh
pytest process in the same VM.  This test fails with the names and output of
the inner tests that failed their last attempt, and fails (never skips) when
the VM cannot start.  COLLAPSAR_SKIP_VM=1 skips it (tests/conftest.py).

Knobs: COLLAPSAR_VM_TIMEOUT_S (default 1800) bounds boot plus inner run;
COLLAPSAR_VM_PYTEST_ARGS adds arguments to the inner pytest (e.g. `-k loss`).
"""

from __future__ import annotations

import os
import pathlib
import shlex
import sys
import time
import xml.etree.ElementTree as ET

import pytest

from collapsar.errors import CollapsarError
from collapsar.vm import run_in_vm

ROOT = pathlib.Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "artifacts" / "vm"
RETRIES = 2
INNER_LOG = ARTIFACTS / "inner.log"
FIGURES = ARTIFACTS / "figures.txt"
STUCK_TEST_S = 300  # the longest inner test takes about 80 s under emulation
# The repository is read-only in the guest: no bytecode or example database
# there; unbuffered so the log shows progress as it happens.
# Retries happen per process (inner_run.py), so none inside one.
GUEST_ENV = {
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONUNBUFFERED": "1",
    "HYPOTHESIS_STORAGE_DIRECTORY": "/tmp/collapsar-hypothesis",
    "COLLAPSAR_TIMING_RERUNS": "0",
}


def _inner_argv() -> list[str]:
    return [
        sys.executable,
        "tests/vm/inner_run.py",
        str(ARTIFACTS),
        str(RETRIES),
        "-v",
        "-rA",
        # The guest sees the repository read-only: no cache directory.
        "-p",
        "no:cacheprovider",
        # A test stuck this long fails with every thread's stack in the
        # log, and the rest of the tier still runs within its time.
        "-o",
        f"timeout={STUCK_TEST_S}",
        *shlex.split(os.environ.get("COLLAPSAR_VM_PYTEST_ARGS", "")),
    ]


def _boot_and_run() -> tuple[int, float]:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for stale in (*ARTIFACTS.glob("junit*.xml"), INNER_LOG, FIGURES):
        stale.unlink(missing_ok=True)
    started = time.monotonic()
    with INNER_LOG.open("w") as log:

        def emit(line: str) -> None:
            log.write(line + "\n")
            log.flush()

        rc = run_in_vm(
            _inner_argv(),
            [ARTIFACTS],
            float(os.environ.get("COLLAPSAR_VM_TIMEOUT_S", "1800")),
            env=GUEST_ENV,
            log=emit,
            cwd=str(ROOT),
        )
    return rc, time.monotonic() - started


def _attempts() -> list[ET.Element]:
    """The JUnit roots of the inner attempts, first to last."""
    found = sorted(ARTIFACTS.glob("junit-*.xml"), key=lambda path: int(path.stem.split("-")[1]))
    return [ET.parse(path).getroot() for path in found]


def _last_outcomes(attempts: list[ET.Element]) -> dict[str, tuple[ET.Element, int]]:
    """Each inner test's case from the last attempt that ran it, with that attempt's number."""
    latest: dict[str, tuple[ET.Element, int]] = {}
    for number, root in enumerate(attempts, start=1):
        for case in root.iter("testcase"):
            latest[f"{case.get('classname')}::{case.get('name')}"] = (case, number)
    return latest


def _describe(case: ET.Element) -> str:
    name = f"{case.get('classname')}::{case.get('name')}"
    for kind in ("failure", "error"):
        bad = case.find(kind)
        if bad is not None:
            text = (bad.text or "")[-3000:]
            return f"--- {kind}: {name}: {bad.get('message', '')}\n{text}"
    return ""


def _figures(outcomes: dict[str, tuple[ET.Element, int]]) -> str:
    """One line per inner test with the figures it recorded (record_property)."""
    lines = []
    for case, attempt in outcomes.values():
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        outcome = "skipped" if case.find("skipped") is not None else ("FAILED" if _describe(case) else "passed")
        if attempt > 1:
            outcome += f" on attempt {attempt}"
        extra = " ".join(f"{k}={v}" for k, v in props.items())
        lines.append(f"{case.get('name')}: {outcome} in {case.get('time')} s {extra}".rstrip())
    return "\n".join(lines)


def test_vm_tier():
    try:
        rc, took_s = _boot_and_run()
    except CollapsarError as exc:
        tail = INNER_LOG.read_text()[-3000:] if INNER_LOG.exists() else ""
        pytest.fail(f"VM tier could not run: {exc}\nguest log {INNER_LOG} ends:\n{tail}", pytrace=False)
    attempts = _attempts()
    if not attempts:
        tail = INNER_LOG.read_text()[-4000:]
        pytest.fail(f"inner pytest exited {rc} without a JUnit report; log tail:\n{tail}", pytrace=False)
    outcomes = _last_outcomes(attempts)
    inner_s = sum(float(suite.get("time", 0)) for root in attempts for suite in root.iter("testsuite"))
    figures = (
        f"VM tier: {len(outcomes)} inner tests, {len(attempts)} attempt(s), exit {rc}; {took_s:.0f} s "
        f"in all, inner pytest {inner_s:.0f} s, so VM start and stop {took_s - inner_s:.0f} s\n"
        f"{_figures(outcomes)}"
    )
    FIGURES.write_text(figures + "\n")
    print(figures)
    first_failures = [text for text in map(_describe, attempts[0].iter("testcase")) if text]
    if len(attempts) > 1:  # what the retries passed is still worth reading
        print(f"{len(first_failures)} inner test(s) failed their first attempt:\n" + "\n".join(first_failures))
    failed = [text for text in (_describe(case) for case, _ in outcomes.values()) if text]
    assert not failed, f"{len(failed)} of {len(outcomes)} VM tests failed all {len(attempts)} attempts:\n" + "\n".join(
        failed
    )
    assert outcomes, f"the VM collected no tests (exit {rc}); see {INNER_LOG}"
    assert rc == 0, f"inner pytest exited {rc} with no failed test; see {INNER_LOG}"
