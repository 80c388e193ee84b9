"""validate's chain check against the real binaries' `--check` (the unit tests
in tests/unit/test_chain_check.py play them with a fake): every example's
workload commands pass, and a bad chain or an unknown target is one
`FILE:LINE: service X: command: wl-client: MESSAGE` line in the C parser's
own words, with exit status 2 and nothing run."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from wl_support import ROOT, SANITIZER_ENV, WORKLOAD

from collapsar.chaincheck import check_chains, workload_services
from collapsar.parser import parse_file, parse_text

EXAMPLES = sorted((ROOT / "topologies").glob("*.yaml"))


@pytest.fixture
def asan_build(binaries, monkeypatch):
    """The sanitizer build, with its options in the environment the checks inherit."""
    for name, value in SANITIZER_ENV.items():
        monkeypatch.setenv(name, value)
    return binaries["client"].parent


@pytest.fixture(scope="module")
def release_build():
    """What `collapsar validate` runs: workload-node/build (scripts/setup.sh builds it too)."""
    done = subprocess.run(["make", "-s", "-C", str(WORKLOAD), "all"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_every_example_passes(asan_build, path):
    experiment = parse_file(path)
    verdict = check_chains(experiment, asan_build)
    assert (verdict.problems, verdict.warning) == ([], None)
    assert verdict.checked == len({s.command for s in workload_services(experiment)})


BAD = textwrap.dedent("""\
    services:
      db: {workload: node, replicas: 2}
      late: {workload: node, replicas: 0}
      typo: {command: [wl-client, --to, db, -F, "db,db-3"]}
      quorum: {command: [wl-client, --to, db, -F, "db,db-2,nack=3"]}
      unit: {command: [wl-client, --to, db, -C, 5parsecs]}
      option: {command: [wl-node, --threads, "2"]}
      joined: {command: [wl-client, --to, late-2, -F, "late,db-2"]}
      yaml:
        workload:
          client: {to: db, requests: 1, chain: [{forward: [db, dbb]}]}
    events:
      - {at: 1s, service: late, action: join, amount: 2}
    """)


def test_bad_chains_are_reported_in_the_parsers_words(asan_build):
    verdict = check_chains(parse_text(BAD, "t.yaml"), asan_build)
    assert verdict.warning is None
    found = {p.where.line: p.message for p in verdict.problems}
    # late-2 joins later: a name like any other.
    assert sorted(found) == [4, 5, 6, 7, 10]
    assert found[4] == "service typo: command: wl-client: -F: unknown target 'db-3' (not one of --names)"
    assert found[10] == "service yaml: workload: wl-client: -F: unknown target 'dbb' (not one of --names)"
    assert found[5].startswith("service quorum: command: wl-client: -F ") and "nack" in found[5]
    assert found[6].startswith("service unit: command: wl-client: -C: ") and "5parsecs" in found[6]
    assert found[7].startswith("service option: command: wl-node: ") and "--threads" in found[7]


def test_validate_exits_2_with_one_line_per_problem(release_build, tmp_path):
    (tmp_path / "bad.yaml").write_text(
        "services:\n  db: {workload: node}\n  c:\n    command: [wl-client, --to, db, -F, dbx]\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "collapsar.cli", "validate", "bad.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == ("bad.yaml:4: service c: command: wl-client: -F: unknown target 'dbx' (not one of --names)\n")
