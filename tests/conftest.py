"""Test tiers are folders: unit (nothing), workload (built C binaries on
loopback), kernel (root + netns on this host), vm (stock kernel in a VM),
docker, browser.  A tier that cannot run fails; set COLLAPSAR_SKIP_<TIER>=1
(e.g. COLLAPSAR_SKIP_VM=1) to skip one on purpose, which pytest reports.

On a virtual machine the session keeps every CPU from halting, as
`collapsar run` does by default there (collapsar/manager/run/awake.py: a halted
virtual CPU of an oversubscribed host wakes up to hundreds of ms late, and
the timing and shaping tests measure Collapsar, not the hypervisor).
COLLAPSAR_KEEP_AWAKE=off|on overrides the detection.

A test marked `timing` asserts a rate, a delay or a deadline, which a host
whose hypervisor starves it for a moment can miss (this project's CI hosts
have stalled for up to 670 ms).  Such a test gets up to TIMING_RERUNS more
tries (pytest-rerunfailures); a regression fails every try, and every rerun
is listed in the summary (`R`), so a flake is seen, not hidden.
COLLAPSAR_TIMING_RERUNS=0 turns this off.  A rerun measures again: the
module-scoped fixtures of the test's own module (a run and what was
measured of it) are torn down before it and set up anew, or the rerun would
assert the same figures (pytest-rerunfailures only drops fixtures that
failed).  Session fixtures (a dockerd, a VM) are kept."""

import os
import pathlib

import pytest

from collapsar.manager.run.awake import KeepAwake

ROOT = pathlib.Path(__file__).resolve().parent.parent
TIERS = ("unit", "workload", "kernel", "vm", "docker", "browser")
TIMING_RERUNS = int(os.environ.get("COLLAPSAR_TIMING_RERUNS", "2"))


def pytest_collection_modifyitems(config, items):
    for item in items:
        tier = pathlib.Path(str(item.fspath)).relative_to(ROOT / "tests").parts[0]
        if tier in TIERS and os.environ.get(f"COLLAPSAR_SKIP_{tier.upper()}") == "1":
            item.add_marker(pytest.mark.skip(reason=f"COLLAPSAR_SKIP_{tier.upper()}=1"))
        if TIMING_RERUNS and item.get_closest_marker("timing") and not item.get_closest_marker("flaky"):
            item.add_marker(pytest.mark.flaky(reruns=TIMING_RERUNS, reruns_delay=2))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    if getattr(item, "execution_count", 1) <= 1 or not item.get_closest_marker("timing"):
        return
    module = item.nodeid.split("::")[0]
    for fixturedefs in item._fixtureinfo.name2fixturedefs.values():
        for fixturedef in fixturedefs:
            if fixturedef.scope in ("module", "class") and fixturedef.baseid == module:
                fixturedef.finish(item._request)  # runs its teardown; the setup that follows measures again


@pytest.fixture(autouse=True, scope="session")
def _keep_cpus_awake():
    with KeepAwake.for_mode(os.environ.get("COLLAPSAR_KEEP_AWAKE", "auto")):
        yield
