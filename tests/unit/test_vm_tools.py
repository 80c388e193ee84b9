"""`collapsar run --vm` finds virtme-ng's tools next to the interpreter that
runs it, so `.venv/bin/collapsar` works without the venv activated (vng
itself starts virtme-run by name).  Real lookups in this installation's
directories, with PATH stripped of the venv."""

import os
import pathlib
import subprocess
import sys

import pytest

from collapsar.errors import EnvironmentProblem
from collapsar.vm import find_tools, tools_search_path

BARE_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
SCRIPTS = pathlib.Path(sys.executable).parent  # where pip put vng and virtme-run (a test dependency)


def test_search_path_puts_the_interpreters_scripts_first():
    entries = tools_search_path(BARE_PATH).split(os.pathsep)
    assert entries[0] == str(SCRIPTS)
    assert entries[-4:] == BARE_PATH.split(":")
    assert tools_search_path(f"{SCRIPTS}:{BARE_PATH}").split(os.pathsep).count(str(SCRIPTS)) == 1


def test_vng_and_virtme_run_are_found_without_the_venv_on_path(monkeypatch):
    monkeypatch.setenv("PATH", BARE_PATH)
    try:
        tools = find_tools()
    except EnvironmentProblem as problem:  # a host without qemu or busybox: still, these two were found
        missing = str(problem).removeprefix("cannot start a VM: ").split(" not found")[0].split(", ")
        assert "vng" not in missing and "virtme-run" not in missing, problem
        return
    assert tools["vng"] == str(SCRIPTS / "vng")
    assert tools["virtme-run"] == str(SCRIPTS / "virtme-run")


def test_a_process_with_a_bare_environment_finds_them():
    """As `env -i PATH=... .venv/bin/collapsar run --vm` starts: no venv on PATH."""
    code = (
        "from collapsar.vm import tools_search_path; import shutil; "
        "print(shutil.which('vng', path=tools_search_path())); "
        "print(shutil.which('virtme-run', path=tools_search_path()))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env={"PATH": BARE_PATH}, capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == [str(SCRIPTS / "vng"), str(SCRIPTS / "virtme-run")]


def test_missing_tools_name_where_they_were_looked_for(tmp_path):
    with pytest.raises(EnvironmentProblem) as problem:
        find_tools(path=str(tmp_path))
    # vng is next to this interpreter; qemu is not (nor anywhere in tmp_path).
    assert "qemu-system-x86_64" in str(problem.value).split(" not found")[0]
    assert f"(looked in {SCRIPTS}" in str(problem.value) and str(tmp_path) in str(problem.value)
