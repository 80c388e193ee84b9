"""Names and addresses of a local run, and the hosts file every namespace sees."""

import pytest

from collapsar.errors import CollapsarError
from collapsar.manager.addressing import IFNAMSIZ, check_run_id, netns_name, new_run_id, plan_network


def test_addresses_start_at_the_second_host_in_instance_order():
    plan = plan_network("a1b2c3", ["client", "server", "server-2"])
    assert [(n.instance, n.ip, n.prefixlen) for n in plan.instances] == [
        ("client", "10.77.0.2", 16),
        ("server", "10.77.0.3", 16),
        ("server-2", "10.77.0.4", 16),
    ]
    assert plan.bridge == "cxa1b2c3br"
    assert [n.host_veth for n in plan.instances] == ["cxa1b2c3v1", "cxa1b2c3v2", "cxa1b2c3v3"]
    assert {n.ifname for n in plan.instances} == {"eth0"}
    assert plan.instances[2].netns == "cx-a1b2c3-server-2"


def test_addresses_cross_the_third_octet():
    plan = plan_network("a1b2c3", [f"i{k}" for k in range(300)], "10.50.0.0/16")
    assert plan.instances[253].ip == "10.50.0.255"
    assert plan.instances[254].ip == "10.50.1.0"
    assert plan.instances[299].ip == "10.50.1.45"


def test_interface_names_fit_ifnamsiz_for_the_largest_run():
    plan = plan_network("ffffff", [f"i{k}" for k in range(1000)], "10.0.0.0/8")
    assert max(len(n.host_veth) for n in plan.instances) <= IFNAMSIZ
    assert len(plan.bridge) <= IFNAMSIZ
    assert len({n.host_veth for n in plan.instances}) == 1000


def test_subnet_too_small_names_the_counts():
    with pytest.raises(
        CollapsarError,
        match=r"--subnet 10.9.0.0/30: room for 1 instances, "
        r"the experiment has 2",
    ):
        plan_network("a1b2c3", ["a", "b"], "10.9.0.0/30")


@pytest.mark.parametrize("subnet", ["10.77.0.1/16", "fd00::/64", "banana"])
def test_bad_subnets_are_rejected(subnet):
    with pytest.raises(CollapsarError, match=f"--subnet {subnet}: expected an IPv4 network"):
        plan_network("a1b2c3", ["a"], subnet)


def test_hosts_file_lists_every_instance_and_localhost():
    plan = plan_network("a1b2c3", ["client", "server"], "10.9.0.0/24")
    assert plan.hosts_text() == (
        "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n10.9.0.2\tclient\n10.9.0.3\tserver\n"
    )


def test_run_ids_are_six_hex_digits_and_checked():
    ids = {new_run_id() for _ in range(50)}
    assert all(check_run_id(i) == i for i in ids)
    assert len(ids) > 45
    with pytest.raises(CollapsarError, match="run id 'xyz': expected six hex digits"):
        check_run_id("xyz")


def test_netns_names_are_file_safe():
    assert netns_name("a1b2c3", "we/b") == "cx-a1b2c3-we_b"
