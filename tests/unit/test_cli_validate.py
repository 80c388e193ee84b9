"""`collapsar validate` and `collapsar import` as a user runs them: a real
subprocess, its exit status, stdout and stderr lines."""

import json
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
    # One line per source, the source missing most destinations first.
    assert done.stderr.splitlines() == [
        "apart.yaml: warning: no path from c to a, b at t=0",
        "apart.yaml: warning: no path from a to c at t=0",
        "apart.yaml: warning: no path from b to c at t=0",
    ]


def test_many_unreachable_pairs_are_summarised_and_json_lists_them_all(tmp_path):
    # Two islands of 150 services, each behind its own bridge: 2 x 150 x 150 pairs without a path.
    names = [f"n{i}" for i in range(300)]
    services = "".join(f"  {name}: {{command: [sleep, '1']}}\n" for name in names)
    links = "".join(f"  - {{from: {name}, to: {'s1' if i < 150 else 's2'}}}\n" for i, name in enumerate(names))
    (tmp_path / "islands.yaml").write_text(f"services:\n{services}bridges: [s1, s2]\nlinks:\n{links}")
    done = collapsar("validate", "islands.yaml", cwd=tmp_path)
    assert done.returncode == 0
    assert done.stderr.splitlines() == [
        "islands.yaml: warning: 45000 instance pairs have no path at t=0, from 300 sources "
        "(3 shown; --json lists every pair)",
        "islands.yaml: warning: no path from n0 to n150, n151, n152 and 147 more at t=0",
        "islands.yaml: warning: no path from n1 to n150, n151, n152 and 147 more at t=0",
        "islands.yaml: warning: no path from n2 to n150, n151, n152 and 147 more at t=0",
    ]
    listed = collapsar("validate", "islands.yaml", "--json", cwd=tmp_path)
    warnings = json.loads(listed.stdout)["warnings"]
    assert len(warnings) == 45000
    assert warnings[0] == {"src": "n0", "dst": "n150", "message": "no path from n0 to n150 at t=0"}


def test_unreachable_summary_names_few_destinations_without_a_count_when_nothing_is_left_out():
    from collapsar.commands.validate import unreachable_summary

    assert unreachable_summary([("a", "b"), ("a", "c"), ("d", "b")]) == [
        "no path from a to b, c at t=0",
        "no path from d to b at t=0",
    ]
    assert unreachable_summary([("a", x) for x in "bcde"], shown=3) == [
        "4 instance pairs have no path at t=0, from 1 source (--json lists every pair)",
        "no path from a to b, c, d and 1 more at t=0",
    ]
    assert unreachable_summary([]) == []


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
