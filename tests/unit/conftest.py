"""Unit tests see the same host wherever they run: one whose TCP default is
cubic (the sharing model weighs flows for the host's default when an
experiment does not name a congestion control; this machine's is bbr)."""

from __future__ import annotations

import pytest

from collapsar.manager.sharing import model


@pytest.fixture(autouse=True)
def host_default_is_cubic(monkeypatch):
    monkeypatch.setattr(model, "host_congestion_control", lambda: "cubic")
