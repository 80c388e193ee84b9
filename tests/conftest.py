"""Test tiers are folders: unit (nothing), workload (built C binaries on
loopback), kernel (root + netns on this host), vm (stock kernel in a VM),
docker, browser.  A tier that cannot run fails; set COLLAPSAR_SKIP_<TIER>=1
(e.g. COLLAPSAR_SKIP_VM=1) to skip one on purpose, which pytest reports."""

import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
TIERS = ("unit", "workload", "kernel", "vm", "docker", "browser")


def pytest_collection_modifyitems(config, items):
    for item in items:
        tier = pathlib.Path(str(item.fspath)).relative_to(ROOT / "tests").parts[0]
        if tier in TIERS and os.environ.get(f"COLLAPSAR_SKIP_{tier.upper()}") == "1":
            item.add_marker(pytest.mark.skip(reason=f"COLLAPSAR_SKIP_{tier.upper()}=1"))
