"""`collapsar validate` and `collapsar import` as a user runs them: a real
subprocess, its exit status, stdout and stderr lines."""

import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "collapsar.cli"]
TOPOLOGIES = sorted((ROOT / "topologies").glob("*.yaml"))


def collapsar(*args, cwd=ROOT):
    return subprocess.run([*CLI, *args], capture_output=True, text=True, cwd=cwd, check=False, timeout=120)


def test_validate_demo_prints_one_summary_line():
    done = collapsar("validate", "topologies/demo.yaml")
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == ("topologies/demo.yaml: ok: 2 services (3 instances), 2 bridges, 3 links, 3 events\n")


@pytest.mark.parametrize("path", TOPOLOGIES, ids=[p.name for p in TOPOLOGIES])
def test_every_example_validates_without_warnings(path):
    done = collapsar("validate", str(path.relative_to(ROOT)))
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.startswith(f"topologies/{path.name}: ok: ")


def test_there_are_examples():
    assert {p.name for p in TOPOLOGIES} >= {"demo.yaml", "dumbbell.yaml", "geo.yaml", "flaky.yaml", "churn.yaml"}


def test_problems_go_to_stderr_with_file_and_line(tmp_path):
    (tmp_path / "bad.yaml").write_text(
        "services:\n  client: {comand: [x]}\nbridges: [s1]\nlinks:\n  - {from: client, to: s1, latency: 10 parsecs}\n"
    )
    done = collapsar("validate", "bad.yaml", cwd=tmp_path)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.splitlines() == [
        "bad.yaml:2: service client: unknown key 'comand' (did you mean 'command'?)",
        "bad.yaml:2: service client: needs a command (or an image for the Docker modes)",
        "bad.yaml:5: link client -> s1: latency: expected a duration like 10ms, 250us or 1.5s, "
        "got unknown time unit 'parsecs' in '10 parsecs'",
    ]


def test_json_verdict_for_a_good_and_a_bad_file(tmp_path):
    import json

    good = collapsar("validate", "topologies/demo.yaml", "--json")
    assert (good.returncode, good.stderr) == (0, "")
    assert json.loads(good.stdout) == {
        "file": "topologies/demo.yaml",
        "ok": True,
        "problems": [],
        "warnings": [],
        "services": 2,
        "instances": 3,
        "bridges": 2,
        "links": 3,
        "events": 3,
    }
    (tmp_path / "bad.yaml").write_text("services:\n  client: {comand: [x]}\n")
    bad = collapsar("validate", "bad.yaml", "--json", cwd=tmp_path)
    assert (bad.returncode, bad.stderr) == (2, "")
    verdict = json.loads(bad.stdout)
    assert verdict["ok"] is False and verdict["warnings"] == []
    assert verdict["problems"][0] == {
        "file": "bad.yaml",
        "line": 2,
        "message": "service client: unknown key 'comand' (did you mean 'command'?)",
    }
    missing = collapsar("validate", "nope.yaml", "--json", cwd=tmp_path)
    assert missing.returncode == 2
    assert json.loads(missing.stdout)["problems"] == [
        {"file": None, "line": None, "message": "nope.yaml: cannot read: No such file or directory"}
    ]


def test_a_missing_file(tmp_path):
    done = collapsar("validate", "nope.yaml", cwd=tmp_path)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == "collapsar: nope.yaml: cannot read: No such file or directory\n"


def test_unreachable_pairs_are_warnings(tmp_path):
    (tmp_path / "apart.yaml").write_text(
        "services:\n  a: {command: [sleep, '1']}\n  b: {command: [sleep, '1']}\n  c: {command: [sleep, '1']}\n"
        "links:\n  - {from: a, to: b, latency: 1ms}\n"
    )
    done = collapsar("validate", "apart.yaml", cwd=tmp_path)
    assert done.returncode == 0
    assert done.stdout == "apart.yaml: ok: 3 services (3 instances), 0 bridges, 1 link, 0 events\n"
    assert sorted(done.stderr.splitlines()) == sorted(
        f"apart.yaml: warning: no path from {src} to {dst} at t=0"
        for src, dst in [("a", "c"), ("b", "c"), ("c", "a"), ("c", "b")]
    )


def test_import_prints_yaml_that_validates(tmp_path):
    done = collapsar("import", str(ROOT / "tests/unit/data/kollaps_iperf.xml"))
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.startswith("experiment:\n  name: kollaps-iperf\nservices:\n")
    (tmp_path / "imported.yaml").write_text(done.stdout)
    again = collapsar("validate", "imported.yaml", cwd=tmp_path)
    assert again.returncode == 0
    assert again.stdout == ("imported.yaml: ok: 3 services (4 instances), 2 bridges, 4 links, 8 events\n")


def test_import_problems_name_the_xml_line(tmp_path):
    (tmp_path / "k.xml").write_text(
        "<experiment>\n<services>\n<service name='a' image='i' replica='2'/>\n</services>\n</experiment>\n"
    )
    done = collapsar("import", "k.xml", cwd=tmp_path)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == ("k.xml:3: service a: unknown attribute 'replica' (did you mean 'replicas'?)\n")
