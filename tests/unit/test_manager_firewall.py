"""When bridged traffic passes through iptables, the run's bridge gets one
tagged ACCEPT rule (local/firewall.py); the real rule is exercised by tests/kernel."""

import pytest

from collapsar.errors import EnvironmentProblem
from collapsar.manager.local import firewall


def test_filtered_only_when_br_netfilter_says_so(tmp_path):
    flag = tmp_path / "bridge-nf-call-iptables"
    assert not firewall.bridged_traffic_filtered(flag)  # br_netfilter not loaded
    flag.write_text("0\n")
    assert not firewall.bridged_traffic_filtered(flag)
    flag.write_text("1\n")
    assert firewall.bridged_traffic_filtered(flag)


def test_rule_matches_only_the_bridge_and_carries_the_tag():
    assert firewall.rule_args("cxab12cdbr", "collapsar ab12cd") == [
        "FORWARD",
        "-i",
        "cxab12cdbr",
        "-o",
        "cxab12cdbr",
        "-m",
        "comment",
        "--comment",
        "collapsar ab12cd",
        "-j",
        "ACCEPT",
    ]


def test_no_rule_and_no_journal_entry_when_not_filtered(monkeypatch, tmp_path):
    monkeypatch.setattr(firewall, "BRIDGE_NF", tmp_path / "absent")
    recorded = []
    assert firewall.allow_bridge("br", "tag", lambda kind, **f: recorded.append(kind)) is False
    assert recorded == []


def test_missing_iptables_names_both_fixes(monkeypatch, tmp_path):
    flag = tmp_path / "flag"
    flag.write_text("1")
    monkeypatch.setattr(firewall, "BRIDGE_NF", flag)
    monkeypatch.setattr(firewall.shutil, "which", lambda name: None)
    with pytest.raises(EnvironmentProblem, match="br_netfilter is loaded") as info:
        firewall.allow_bridge("br", "tag", lambda kind, **f: None)
    assert "install iptables" in str(info.value) and "bridge-nf-call-iptables=0" in str(info.value)
