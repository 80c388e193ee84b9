"""Duplication in the tc plan, the netem message and the duplicator's
numbers: no kernel (tests/kernel/test_tcal_duplicate.py has the real one)."""

import struct

import pytest

from collapsar.errors import CollapsarError
from collapsar.impairments import Extras
from collapsar.tcal import duplicate
from collapsar.tcal.duplicate import Duplicator, address_key, probability
from collapsar.tcal.nlmsg import netem_options
from collapsar.tcal.plan import LeafParams, Shaping, describe_leaf, leaf_params, plan_tree
from collapsar.tcal.tree import kernel_leaf

IP = "10.0.1.2"


def test_a_tree_without_netem_duplicates_on_its_pfifo_leaf():
    shaping = Shaping(IP, 10_000_000, extras=Extras(duplicate_ratio=0.1))
    assert leaf_params(shaping, netem=False) == LeafParams("pfifo", 17, duplicate_ratio=0.1)
    with pytest.raises(CollapsarError, match=r"delay, jitter and loss .* need sch_netem, .*\(delay_us=1000,"):
        leaf_params(Shaping(IP, None, delay_us=1000, extras=Extras(duplicate_ratio=0.1)), netem=False)
    with pytest.raises(CollapsarError, match="reorder_ratio=0.2"):
        leaf_params(Shaping(IP, None, extras=Extras(duplicate_ratio=0.1, reorder_ratio=0.2)), netem=False)


def test_describe_says_the_copy_is_made_by_ebpf():
    plan = plan_tree([Shaping(IP, 10_000_000, delay_us=10_000, extras=Extras(duplicate_ratio=0.1))])
    assert plan.dests[0].leaf.duplicate_ratio == 0.1
    assert plan.describe()[4].endswith(
        "leaf 10: netem delay 10ms loss 0 limit 35 then queue pfifo limit 17; "
        "duplicate 0.1 (eBPF copy at clsact egress, shaped by this class)"
    )
    pfifo = leaf_params(Shaping(IP, None, extras=Extras(duplicate_ratio=0.25)), netem=False)
    assert describe_leaf(pfifo) == "pfifo limit 1000; duplicate 0.25 (eBPF copy at clsact egress, shaped by this class)"
    assert describe_leaf(LeafParams("pfifo", 7)) == "pfifo limit 7"


def test_netem_is_never_asked_to_duplicate():
    leaf = leaf_params(
        Shaping(IP, None, delay_us=10_000, loss_ratio=0.01, extras=Extras(duplicate_ratio=1.0)), netem=True
    )
    options = netem_options(leaf, with_table=False)
    latency, limit, loss, gap, dup, jitter = struct.unpack_from("=IIIIII", options, 4)  # after the attribute header
    assert (latency, limit, loss, gap, dup, jitter) == (156_250, leaf.limit_pkts, round(0.01 * 0xFFFFFFFF), 0, 0, 0)
    # A change of the ratio alone sends no leaf message: the kernel's leaf is the same.
    assert kernel_leaf(leaf) == kernel_leaf(leaf._replace(duplicate_ratio=0.5)) == leaf._replace(duplicate_ratio=0.0)


def test_probabilities_and_keys_as_the_program_reads_them():
    assert probability(0.0) == 0
    assert probability(1.0) == 0xFFFF_FFFF
    assert probability(0.1) == 429_496_730
    assert probability(1e-12) == 1  # above 0 is never "none"
    assert address_key("10.0.1.2").to_bytes(4, "little") == bytes([10, 0, 1, 2])  # network order in memory


def test_duplicator_refuses_bad_values_and_stays_detached_at_zero():
    dup = Duplicator("veth0", "no-such-netns")
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(CollapsarError, match="duplicate ratio must lie in"):
            dup.set(IP, bad)
    with pytest.raises(CollapsarError, match="'not an address': expected an IPv4 address"):
        dup.set("not an address", 0.0)
    dup.set(IP, 0.0)  # nothing to copy: nothing is loaded or attached
    assert not dup.attached and dup.ratios == {} and duplicate.DUPLICATOR_PRIORITY == 0xFFFF
