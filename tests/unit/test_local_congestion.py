"""Local mode's check of the experiment's TCP congestion control, before anything is built."""

from __future__ import annotations

import os

import pytest

from collapsar.errors import KernelError
from collapsar.manager.local import netns


@pytest.fixture
def kernel(tmp_path, monkeypatch):
    available = tmp_path / "available"
    available.write_text("reno cubic\n")
    monkeypatch.setattr(netns, "AVAILABLE_CONTROLS", available)
    monkeypatch.setattr(netns, "MODULES", tmp_path / "modules")
    return tmp_path / "modules" / os.uname().release / "kernel/net/ipv4"


def test_a_control_the_kernel_has_passes(kernel):
    netns.check_congestion_control("cubic")


def test_a_control_the_kernel_can_load_passes(kernel):
    kernel.mkdir(parents=True)
    (kernel / "tcp_bbr.ko.xz").write_bytes(b"")
    netns.check_congestion_control("bbr")


def test_a_control_the_kernel_lacks_is_one_line_naming_the_fix(kernel):
    with pytest.raises(KernelError) as raised:
        netns.check_congestion_control("bbr")
    assert str(raised.value) == (
        f"experiment: congestion-control: bbr: this kernel ({os.uname().release}) has no tcp_bbr "
        "(available: reno cubic); fix: a kernel with CONFIG_TCP_CONG_BBR, "
        "or leave the key out to use the host's default"
    )
