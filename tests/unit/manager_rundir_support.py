"""What the run directory and cleanup tests share (test_manager_rundir_*.py,
test_manager_cleanup_plan.py): `state`, a temporary COLLAPSAR_STATE_DIR (a
fixture: import it by name), `records(...)`, journal records from (kind,
fields) pairs, and JOURNAL, the records the manager writes for a run of two
instances."""

import pytest


@pytest.fixture
def state(tmp_path, monkeypatch):
    path = tmp_path / "state"
    monkeypatch.setenv("COLLAPSAR_STATE_DIR", str(path))
    return path


def records(*kinds_and_fields):
    return [{"kind": kind, **fields} for kind, fields in kinds_and_fields]


# What the manager writes for a run of two instances (local/netns.py, local/run.py).
JOURNAL = records(
    ("run", {"run_id": "a1b2c3", "pid": 1, "start_time": 5}),
    ("bridge", {"name": "cxa1b2c3br"}),
    ("netns", {"name": "cx-a1b2c3-a", "instance": "a"}),
    ("netns_inode", {"name": "cx-a1b2c3-a", "inode": 11}),
    ("hosts", {"path": "/etc/netns/cx-a1b2c3-a/hosts"}),
    ("veth", {"name": "cxa1b2c3v1", "instance": "a"}),
    ("netns", {"name": "cx-a1b2c3-b", "instance": "b"}),
    ("netns_inode", {"name": "cx-a1b2c3-b", "inode": 12}),
    ("hosts", {"path": "/etc/netns/cx-a1b2c3-b/hosts"}),
    ("veth", {"name": "cxa1b2c3v2", "instance": "b"}),
    ("qdisc", {"netns": "cx-a1b2c3-a", "ifname": "eth0", "handle": "1:"}),
    ("bpf_pin", {"path": "/sys/fs/bpf/collapsar/a1b2c3/counters"}),
    ("fw_accept", {"bridge": "cxa1b2c3br", "tag": "collapsar a1b2c3"}),
    ("process", {"instance": "a", "pid": 4242, "start_time": 77}),
)
