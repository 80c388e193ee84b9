"""Unit tests see the same host wherever they run: one whose TCP default is
cubic (the sharing model weighs flows for the host's default when an
experiment does not name a congestion control; this machine's is bbr)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from collapsar.manager.sharing import model


@pytest.fixture(autouse=True)
def host_default_is_cubic(monkeypatch):
    monkeypatch.setattr(model, "host_congestion_control", lambda: "cubic")


ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def load_bench():
    """load_bench(name): bench/<name>.py as a module (the benches are scripts,
    importing each other and tests/reference_net.py from their folders)."""

    def load(name: str):
        for folder in (ROOT / "tests", ROOT / "bench"):
            if str(folder) not in sys.path:
                sys.path.insert(0, str(folder))
        spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    return load
