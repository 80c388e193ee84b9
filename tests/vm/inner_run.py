"""The VM tier's run inside the guest: pytest over tests/vm, then the
failed tests again, each retry in a fresh pytest process.

    python tests/vm/inner_run.py ARTIFACTS RETRIES [pytest args...]

Every VM test measures delay, loss or rates on CPUs emulated in software,
where a host that starves qemu for a moment slows everything down.  A rerun
inside the same pytest process would reuse a module-scoped experiment (the
sharing runs, the local run) and measure nothing new, so a failed test is
run again in a new process, up to RETRIES more times, in this same VM (a
VM start costs a minute).  Attempt N writes ARTIFACTS/junit-N.xml; a
regression fails every attempt.  The exit code is the last attempt's.
"""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def failed_ids(junit: Path) -> list[str]:
    """Node ids of the failed or errored cases (the VM tests are module-level
    functions: classname tests.vm.test_x, name test_y[param])."""
    ids = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            module = case.get("classname", "").replace(".", "/") + ".py"
            ids.append(f"{module}::{case.get('name')}")
    return sorted(set(ids))


def main(argv: list[str]) -> int:
    artifacts, retries, extra = Path(argv[0]), int(argv[1]), argv[2:]
    targets = ["tests/vm"]
    rc = 0
    for attempt in range(retries + 1):
        junit = artifacts / f"junit-{attempt}.xml"
        if attempt:
            print(
                f"== VM tier: attempt {attempt + 1} of {retries + 1}, in a fresh pytest: {' '.join(targets)}",
                flush=True,
            )
        rc = subprocess.run([sys.executable, "-m", "pytest", *targets, f"--junitxml={junit}", *extra]).returncode
        if not junit.exists():
            return rc or 1
        targets = failed_ids(junit)
        if rc == 0 or not targets:
            return rc
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
