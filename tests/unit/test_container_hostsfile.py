"""The instance-name block of a container's /etc/hosts (hostsfile.py)."""

import os

import pytest

from collapsar.manager.container import hostsfile

DOCKER_HOSTS = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost\n10.0.0.7\tabc123def456\n"


def test_the_block_is_appended_and_docker_lines_are_kept():
    text = hostsfile.with_block(DOCKER_HOSTS, {"server": "10.0.0.3", "client-2": "10.0.0.5"})
    assert text == (DOCKER_HOSTS + hostsfile.BEGIN + "\n10.0.0.5\tclient-2\n10.0.0.3\tserver\n"
                    + hostsfile.END + "\n")


def test_a_second_block_replaces_the_first_wherever_it_was():
    once = hostsfile.with_block(DOCKER_HOSTS, {"server": "10.0.0.3"})
    moved = once + "10.0.0.9\tadded-by-the-user\n"
    twice = hostsfile.with_block(moved, {"server": "10.0.0.4", "late": "10.0.0.8"})
    assert twice.count(hostsfile.BEGIN) == 1 and "10.0.0.3" not in twice
    assert twice.startswith(DOCKER_HOSTS + "10.0.0.9\tadded-by-the-user\n" + hostsfile.BEGIN)
    assert twice.endswith("10.0.0.8\tlate\n10.0.0.4\tserver\n" + hostsfile.END + "\n")


def test_a_process_sharing_our_root_is_not_a_container_and_its_hosts_file_is_left_alone():
    before = open("/etc/hosts").read()
    assert hostsfile.update(os.getpid(), {"server": "10.0.0.3"}) is False
    assert open("/etc/hosts").read() == before


def test_a_gone_process_is_an_oserror():
    with pytest.raises(OSError):
        hostsfile.update(2 ** 22 + 1, {"server": "10.0.0.3"})


def test_the_shaped_mark_is_not_written_outside_a_container(tmp_path):
    assert hostsfile.mark_shaped(os.getpid()) is False
    assert not os.path.exists(hostsfile.SHAPED_MARK)
