"""Let the run's bridge forward between its own ports when the host firewall
would filter bridged traffic.

With br_netfilter loaded (Docker loads it, and sets the FORWARD policy to
DROP), frames crossing any Linux bridge also traverse the host's iptables
FORWARD chain, so instances on our bridge could not reach each other at all,
with no error anywhere.  Where that is the case we insert one ACCEPT rule for
traffic that enters and leaves our bridge, first in FORWARD, tagged with the
run id; the journal records it before it is made, and teardown (or
`collapsar cleanup`) deletes exactly that rule.  Nothing else in the host's
ruleset is touched, and hosts without br_netfilter get no rule at all.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from collapsar.errors import EnvironmentProblem, KernelError

BRIDGE_NF = Path("/proc/sys/net/bridge/bridge-nf-call-iptables")


def bridged_traffic_filtered(flag: Path | None = None) -> bool:
    flag = BRIDGE_NF if flag is None else flag
    try:
        return flag.read_text().strip() == "1"
    except FileNotFoundError:  # br_netfilter not loaded: bridges skip iptables
        return False


def rule_args(bridge: str, tag: str) -> list[str]:
    return ["FORWARD", "-i", bridge, "-o", bridge, "-m", "comment", "--comment", tag, "-j", "ACCEPT"]


def _iptables() -> str:
    found = shutil.which("iptables")
    if found is None:
        raise EnvironmentProblem(
            "bridged traffic on this host passes through iptables (br_netfilter is loaded, "
            "e.g. by Docker), but the iptables command is missing, so the run's bridge cannot "
            "be let through",
            "install iptables, or `sysctl net.bridge.bridge-nf-call-iptables=0`",
        )
    return found


def _call(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=30)


def allow_bridge(bridge: str, tag: str, record) -> bool:
    """Insert the ACCEPT rule if bridged traffic is filtered; `record` journals it first."""
    if not bridged_traffic_filtered():
        return False
    iptables = _iptables()
    record("fw_accept", bridge=bridge, tag=tag)
    chain, *match = rule_args(bridge, tag)
    done = _call([iptables, "-w", "-I", chain, "1", *match])  # first: before any DROP
    if done.returncode != 0:
        raise KernelError(f"bridge {bridge}: cannot add the iptables FORWARD accept rule: {done.stderr.strip()}")
    return True


def remove_rule(bridge: str, tag: str) -> bool:
    """Delete the run's rule if it is there; True if one was deleted."""
    iptables = shutil.which("iptables")
    if iptables is None:
        return False
    if _call([iptables, "-w", "-C", *rule_args(bridge, tag)]).returncode != 0:
        return False
    done = _call([iptables, "-w", "-D", *rule_args(bridge, tag)])
    if done.returncode != 0:
        raise KernelError(f"cannot delete the iptables rule for bridge {bridge}: {done.stderr.strip()}")
    return True
