"""A real local run cuts an instance off by its guard (collapsar.tcal.guard):
while it is disconnected no one reaches it, the others' trees are not
touched (their filters still point at their classes), and it is reached
again once reconnected."""

from __future__ import annotations

import time

from netns_helpers import sh
from test_local_support import Cli, read_json, run_id_of

from collapsar.manager.addressing import INSTANCE_IFNAME

TOPOLOGY = """\
experiment: {{name: local-guard}}
services:
  target: {{command: [sleep, "60"]}}
  prober:
    command: [sh, -c, "sleep 0.5; ping -c 1 -W 1 target > {out}/before; sleep 1.5;
              ping -c 1 -W 1 target > {out}/during; sleep 2;
              ping -c 1 -W 1 target > {out}/after; true"]
  other: {{command: [sleep, "60"]}}
bridges: [sw]
links:
  - {{from: target, to: sw, bandwidth: 50Mbps}}
  - {{from: prober, to: sw, bandwidth: 50Mbps}}
  - {{from: other, to: sw, bandwidth: 50Mbps}}
events:
  - {{at: 1s, service: target, action: disconnect}}
  - {{at: 4s, service: target, action: reconnect}}
"""


def test_a_disconnected_instance_is_cut_off_by_its_guard_alone(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "guard.yaml").write_text(TOPOLOGY.format(out=out))
    cli = Cli(
        "run", str(tmp_path / "guard.yaml"), "--duration", "7s", "--subnet", "10.78.4.0/24",
        "--run-dir", str(tmp_path / "runs"), "--grace", "0.5s", "--status-port", "-1", "--tree", "full",
    )  # fmt: skip
    try:
        run_id = run_id_of([cli.wait_line("run ")])
        run_dir = tmp_path / "runs" / run_id
        cli.wait_line("all 3 instances up in ")
        t0 = time.time()
        plan = read_json(run_dir / "plan.json")
        by_name = {i["name"]: i for i in plan["instances"]}
        target, prober = by_name["target"], by_name["prober"]
        time.sleep(max(0.0, t0 + 2.5 - time.time()))  # in the middle of the disconnection
        guard = sh("tc", "filter", "show", "dev", target["veth"], "egress").stdout
        prober_tree = sh("tc", "filter", "show", "dev", INSTANCE_IFNAME, ns=prober["netns"]).stdout
        code, lines, stderr = cli.finish(60)
    finally:
        cli.kill()
    assert code == 0, (lines, stderr)
    assert "cx_guard" in guard and "direct-action" in guard, guard
    # prober's own tree still sends target's packets to target's class: the
    # cut was the guard's, not a message to this tree.
    target_ip = target["ip"]
    assert "flowid 1:2" not in _node_of(prober_tree, target_ip), prober_tree
    assert "1 received" in (out / "before").read_text()
    assert "0 received" in (out / "during").read_text()
    assert "1 received" in (out / "after").read_text()
    log = read_json(run_dir / "events.json")
    assert [e["label"] for e in log] == ["target disconnect [target]", "target reconnect [target]"]
    assert all(e["error"] is None for e in log), log


def _node_of(filters: str, ip: str) -> str:
    """The u32 node (its lines) that matches `ip`, from `tc filter show`."""
    want = "".join(f"{int(part):02x}" for part in ip.split("."))
    blocks, current = [], []
    for line in filters.splitlines():
        if line.startswith("filter") and current:
            blocks.append("\n".join(current))
            current = []
        current.append(line)
    blocks.append("\n".join(current))
    found = [block for block in blocks if f"match {want}/ffffffff" in block]
    assert len(found) == 1, filters
    return found[0]
