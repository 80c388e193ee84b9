"""What the sharing benchmark's modules share (sharing_bench.py,
sharing_real_runs.py): units, the period, the metadata key, and the tests
folder on the import path for the multi-manager harness (share_peer.py)."""

import sys
from pathlib import Path

# The multi-manager harness and its fake tc tree live with the tests.
TESTS = Path(__file__).resolve().parent.parent / "tests"
SHARE_PEER = TESTS / "share_peer.py"
sys.path.insert(0, str(TESTS))
M = 1_000_000
PERIODS_PER_S = 20  # the default 50 ms period
BENCH_KEY = bytes(32)  # every manager of the bench shares it; what it is does not matter
