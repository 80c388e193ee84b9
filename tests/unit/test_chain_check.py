"""validate's chain check (collapsar.chaincheck) against the binaries' `--check`
interface, played by a fake: a shell script that records its argv and answers
as the interface says (JSON on stdout and exit 0, or `wl-client: MESSAGE` on
stderr and exit 2).  The real binaries are checked in
tests/workload/test_validate_chains.py."""

from __future__ import annotations

import json
import textwrap
import time

import pytest

from collapsar import chaincheck
from collapsar.chaincheck import check_chains, reachable_names
from collapsar.cli import main
from collapsar.manager import programs
from collapsar.parser import parse_text

# Answers 2 with the interface's one line when an argument mentions "bad",
# 0 with a JSON line otherwise; every call's argv goes to calls.log.
FAKE = """\
#!/bin/sh
printf '%s\\n' "$*" >> "$(dirname "$0")/calls.log"
for word in "$@"; do
  case "$word" in *bad*) echo "$(basename "$0"): -F: unknown target 'bad' (not an instance)" >&2; exit 2;; esac
done
echo '{"program":"'"$(basename "$0")"'"}'
"""

TOPOLOGY = """\
services:
  db: {workload: node, replicas: 2}
  late: {command: [sleep, "1"], replicas: 0}
  users:
    command: [wl-client, --to, db, -F, "db,db-2"]
  twin: {command: [wl-client, --to, db, -F, "db,db-2"]}
  shell: {command: [sh, -c, "wl-client --to bad"]}
events:
  - {at: 1s, service: late, action: join, amount: 2}
"""


def fake_build(tmp_path, script=FAKE, names=("wl-client", "wl-node")):
    build = tmp_path / "build"
    build.mkdir()
    for name in names:
        (build / name).write_text(script)
        (build / name).chmod(0o755)
    return build


def calls(build) -> list[str]:
    log = build / "calls.log"
    return sorted(log.read_text().splitlines()) if log.exists() else []


def parse(text: str):
    return parse_text(textwrap.dedent(text), "t.yaml")


def test_names_are_every_service_and_instance_joins_included():
    assert reachable_names(parse(TOPOLOGY)) == ["db", "db-2", "late", "users", "twin", "shell", "late-2"]


def test_each_distinct_command_is_checked_once_with_every_name(tmp_path):
    build = fake_build(tmp_path)
    verdict = check_chains(parse(TOPOLOGY), build)
    assert (verdict.problems, verdict.warning, verdict.checked) == ([], None, 2)
    names = "db,db-2,late,users,twin,shell,late-2"
    # users and twin write the same command: one check; `sh -c` is not looked into.
    assert calls(build) == [f"--check --names {names}", f"--check --names {names} --to db -F db,db-2"]


def test_a_refused_command_is_a_problem_at_its_line(tmp_path):
    build = fake_build(tmp_path)
    experiment = parse("""\
        services:
          db: {workload: node}
          users:
            command: [wl-client, --to, bad]
          robots:
            workload:
              client: {to: bad, requests: 1}
        """)
    verdict = check_chains(experiment, build)
    assert [str(p) for p in verdict.problems] == [
        "t.yaml:4: service users: command: wl-client: -F: unknown target 'bad' (not an instance)",
        "t.yaml:6: service robots: workload: wl-client: -F: unknown target 'bad' (not an instance)",
    ]


def test_validate_reports_the_problem_and_exits_2(tmp_path, monkeypatch, capsys):
    build = fake_build(tmp_path)
    monkeypatch.setattr(programs, "workload_build_dir", lambda: build)
    (tmp_path / "t.yaml").write_text(
        "services:\n  db: {workload: node}\n"
        "  c: {command: [wl-client, --to, bad]}\n  d: {command: [wl-client, --to, bad]}\n"
    )
    assert main(["validate", str(tmp_path / "t.yaml")]) == 2
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err.splitlines() == [
        f"{tmp_path}/t.yaml:3: service c: command: wl-client: -F: unknown target 'bad' (not an instance)",
        f"{tmp_path}/t.yaml:4: service d: command: wl-client: -F: unknown target 'bad' (not an instance)",
    ]
    assert main(["validate", str(tmp_path / "t.yaml"), "--json"]) == 2
    verdict = json.loads(capsys.readouterr().out)
    assert verdict["ok"] is False
    assert verdict["problems"][0] == {
        "file": f"{tmp_path}/t.yaml",
        "line": 3,
        "message": "service c: command: wl-client: -F: unknown target 'bad' (not an instance)",
    }


def test_validate_prints_the_commands_it_will_run(tmp_path, monkeypatch, capsys):
    build = fake_build(tmp_path)
    monkeypatch.setattr(programs, "workload_build_dir", lambda: build)
    (tmp_path / "t.yaml").write_text(
        "services:\n  db: {workload: {node: {threads: 2}}}\n"
        "  c: {workload: {client: {to: db, rate: 5/s, duration: 2s, chain: [{store: 1k, sync: true}]}}}\n"
        "  x: {image: 'alpine:3'}\n"
        "links:\n  - {from: db, to: c}\n"
    )
    assert main(["validate", str(tmp_path / "t.yaml"), "--commands"]) == 0
    out = capsys.readouterr()
    assert out.out.splitlines()[1:] == ["  db: wl-node --nt 2", "  c: wl-client --to db -r 5 -n 10 -S 1k,sync"]
    assert main(["validate", str(tmp_path / "t.yaml"), "--commands", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["commands"] == {
        "db": ["wl-node", "--nt", "2"],
        "c": ["wl-client", "--to", "db", "-r", "5", "-n", "10", "-S", "1k,sync"],
    }


def test_no_build_is_one_warning_and_validation_goes_on(tmp_path):
    verdict = check_chains(parse(TOPOLOGY), tmp_path / "nothing")
    assert verdict.problems == []
    assert verdict.warning == (
        f"wl-client and wl-node commands not checked: {tmp_path}/nothing/wl-client, "
        f"{tmp_path}/nothing/wl-node not built; fix: make -C workload-node"
    )


def test_a_build_from_before_check_is_a_warning(tmp_path):
    build = fake_build(
        tmp_path,
        "#!/bin/sh\necho \"$0: unrecognized option '--check'\" >&2\necho 'usage: wl-client [options]' >&2\nexit 2\n",
    )
    verdict = check_chains(parse(TOPOLOGY), build)
    assert verdict.problems == []
    assert verdict.warning == (
        f"wl-client and wl-node commands not checked: {build}/wl-node was built "
        "before --check existed; fix: make -C workload-node"
    )


def test_a_check_that_crashes_or_hangs_is_a_problem(tmp_path, monkeypatch):
    experiment = parse("services:\n  c: {command: [wl-client]}\n")
    crash = fake_build(tmp_path, "#!/bin/sh\necho 'Segmentation fault' >&2\nkill -SEGV $$\n", ("wl-client",))
    assert [str(p) for p in check_chains(experiment, crash).problems] == [
        "t.yaml:2: service c: command: wl-client --check failed (exit status -11): Segmentation fault"
    ]
    monkeypatch.setattr(chaincheck, "CHECK_TIMEOUT_S", 0.3)
    (crash / "wl-client").write_text("#!/bin/sh\nexec sleep 5\n")
    started = time.monotonic()
    assert [str(p) for p in check_chains(experiment, crash).problems] == [
        "t.yaml:2: service c: command: wl-client --check did not answer within 0.3 s"
    ]
    assert time.monotonic() - started < 3


def test_a_long_names_list_keeps_the_names_the_command_mentions(tmp_path, monkeypatch):
    monkeypatch.setattr(chaincheck, "NAMES_MAX_CHARS", 20)
    build = fake_build(tmp_path)
    experiment = parse(
        "services:\n  server: {command: [sleep, '1'], replicas: 12}\n"
        "  c: {command: [wl-client, --to, server-11, -F, 'server,server-2']}\n"
    )
    check_chains(experiment, build)
    assert calls(build) == ["--check --names server,server-2,server-11 --to server-11 -F server,server-2"]


def test_without_workload_commands_nothing_runs(tmp_path):
    verdict = check_chains(parse("services:\n  a: {command: [iperf3, -s]}\n"), tmp_path / "none")
    assert (verdict.problems, verdict.warning, verdict.checked) == ([], None, 0)


def test_fifty_services_are_checked_in_parallel(tmp_path):
    # Each fake check takes 0.2 s: one after the other they would take 10 s.
    build = fake_build(tmp_path, "#!/bin/sh\nsleep 0.2\necho '{}'\n")
    lines = [f"  c{i}: {{command: [wl-client, --to, db, -n, '{i + 1}']}}" for i in range(50)]
    experiment = parse("services:\n  db: {workload: node}\n" + "\n".join(lines) + "\n")
    started = time.monotonic()
    verdict = check_chains(experiment, build)
    took = time.monotonic() - started
    assert (verdict.problems, verdict.checked) == ([], 51)
    assert took < 5, f"{took:.1f} s"


@pytest.mark.parametrize("argv0", ["wl-client", "/usr/local/bin/wl-client", "./wl-client"])
def test_the_program_is_known_by_its_basename(argv0):
    experiment = parse(f"services:\n  c: {{command: ['{argv0}', --to, c]}}\n  d: {{command: [wl-clients]}}\n")
    assert [s.name for s in chaincheck.workload_services(experiment)] == ["c"]


def test_validate_names_a_missing_build_once(tmp_path, monkeypatch, capsys):
    """Without the build, the program warning (collapsar.manager.programs)
    already names the fix: the chain check adds nothing; with the programs
    found elsewhere on PATH, it says once that it could not check."""
    empty = tmp_path / "nothing"
    monkeypatch.setattr(programs, "workload_build_dir", lambda: empty)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    (tmp_path / "t.yaml").write_text(
        "services:\n  db: {workload: node}\n  c: {command: [wl-client, --to, db]}\nlinks:\n  - {from: db, to: c}\n"
    )
    assert main(["validate", str(tmp_path / "t.yaml")]) == 0
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "make -C workload-node" in err[0] and "not checked" not in err[0], err
    elsewhere = fake_build(tmp_path)  # wl-node and wl-client on PATH, not in the build
    monkeypatch.setenv("PATH", f"{elsewhere}:/usr/bin:/bin")
    assert main(["validate", str(tmp_path / "t.yaml")]) == 0
    assert capsys.readouterr().err.splitlines() == [
        f"{tmp_path}/t.yaml: warning: wl-client and wl-node commands not checked: {empty}/wl-client, "
        f"{empty}/wl-node not built; fix: make -C workload-node"
    ]
