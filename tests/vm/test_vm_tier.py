"""Host side of the VM tier: boot ONE stock-kernel VM and run `pytest tests/vm` in it.

A VM start costs about a minute under software emulation, so the whole tier
shares one.  The inner run writes a JUnit XML and its log to artifacts/vm/
(shared read-write with the guest); this test fails with the names and
output of the inner failures, and fails (never skips) when the VM cannot
start.  COLLAPSAR_SKIP_VM=1 skips it (tests/conftest.py).

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
JUNIT = ARTIFACTS / "junit.xml"
INNER_LOG = ARTIFACTS / "inner.log"
FIGURES = ARTIFACTS / "figures.txt"
# The repository is read-only in the guest: no bytecode or example database
# there; unbuffered so the log shows progress as it happens.
GUEST_ENV = {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1",
             "HYPOTHESIS_STORAGE_DIRECTORY": "/tmp/collapsar-hypothesis"}


def _inner_argv() -> list[str]:
    return [sys.executable, "-m", "pytest", "tests/vm", "-v", "-rA",
            # The guest sees the repository read-only: no cache directory.
            "-p", "no:cacheprovider", f"--junitxml={JUNIT}",
            *shlex.split(os.environ.get("COLLAPSAR_VM_PYTEST_ARGS", ""))]


def _boot_and_run() -> tuple[int, float]:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for stale in (JUNIT, INNER_LOG, FIGURES):
        stale.unlink(missing_ok=True)
    started = time.monotonic()
    with INNER_LOG.open("w") as log:
        def emit(line: str) -> None:
            log.write(line + "\n")
            log.flush()

        rc = run_in_vm(_inner_argv(), [ARTIFACTS], float(os.environ.get("COLLAPSAR_VM_TIMEOUT_S", "1800")),
                       env=GUEST_ENV,
                       log=emit, cwd=str(ROOT))
    return rc, time.monotonic() - started


def _cases(root: ET.Element) -> list[ET.Element]:
    return list(root.iter("testcase"))


def _describe(case: ET.Element) -> str:
    name = f"{case.get('classname')}::{case.get('name')}"
    for kind in ("failure", "error"):
        bad = case.find(kind)
        if bad is not None:
            text = (bad.text or "")[-3000:]
            return f"--- {kind}: {name}: {bad.get('message', '')}\n{text}"
    return ""


def _figures(cases: list[ET.Element]) -> str:
    """One line per inner test with the figures it recorded (record_property)."""
    lines = []
    for case in cases:
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        outcome = "skipped" if case.find("skipped") is not None else (
            "FAILED" if _describe(case) else "passed")
        extra = " ".join(f"{k}={v}" for k, v in props.items())
        lines.append(f"{case.get('name')}: {outcome} in {case.get('time')} s {extra}".rstrip())
    return "\n".join(lines)


def test_vm_tier():
    try:
        rc, took_s = _boot_and_run()
    except CollapsarError as exc:
        tail = INNER_LOG.read_text()[-3000:] if INNER_LOG.exists() else ""
        pytest.fail(f"VM tier could not run: {exc}\nguest log {INNER_LOG} ends:\n{tail}", pytrace=False)
    if not JUNIT.exists():
        tail = INNER_LOG.read_text()[-4000:]
        pytest.fail(f"inner pytest exited {rc} without a JUnit report; log tail:\n{tail}", pytrace=False)
    root = ET.parse(JUNIT).getroot()
    cases = _cases(root)
    inner_s = sum(float(suite.get("time", 0)) for suite in root.iter("testsuite"))
    figures = (f"VM tier: {len(cases)} inner tests, exit {rc}; {took_s:.0f} s in all, inner pytest "
               f"{inner_s:.0f} s, so VM start and stop {took_s - inner_s:.0f} s\n{_figures(cases)}")
    FIGURES.write_text(figures + "\n")
    print(figures)
    failed = [text for text in map(_describe, cases) if text]
    assert not failed, f"{len(failed)} of {len(cases)} VM tests failed:\n" + "\n".join(failed)
    assert cases, f"the VM collected no tests (exit {rc}); see {INNER_LOG}"
    assert rc == 0, f"inner pytest exited {rc} with no failed test; see {INNER_LOG}"
