"""`collapsar cleanup` (root) against journals it must not obey, for real.

Each test plants what a user with a writable directory, a stray file or a
damaged journal could put in front of a root cleanup: a journal in the
current directory, records naming what the run never made (a file outside
/etc/netns, another link, a foreign process, a namespace path outside
/run/netns), symlinks in place of the journal or of the run directory, and a
state directory others can write or own.  Every time the real CLI must
refuse with one line that says why, exit non-zero, and leave each of those
things exactly as it was; a journal of the run's own records is still
cleaned, also next to a refused one (--all-stale)."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
from pathlib import Path

import pytest
from test_local_support import CLI

from collapsar.manager.local.rundir import process_start_time

NOBODY = 65534


@pytest.fixture
def state(tmp_path) -> Path:
    path = tmp_path / "state"
    (path / "journals").mkdir(parents=True)
    return path


@pytest.fixture
def run_id() -> str:
    return secrets.token_hex(3)


@pytest.fixture
def made():
    """Namespaces, links, files and processes a test made: removed afterwards,
    by name and pid, whatever the cleanup under test did."""
    things: dict[str, list] = {"netns": [], "links": [], "paths": [], "procs": []}
    yield things
    for proc in things["procs"]:
        proc.kill()
        proc.wait()
    for name in things["links"]:
        subprocess.run(["ip", "link", "del", name], capture_output=True)
    for name in things["netns"]:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)
    for path in reversed(things["paths"]):
        if path.is_file() or path.is_symlink():
            path.unlink()
        elif path.is_dir():
            path.rmdir()


def cleanup(state: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*CLI, "cleanup", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        env={**os.environ, "COLLAPSAR_STATE_DIR": str(state)},
    )


def dead_manager(run_id: str, run_dir: Path) -> dict:
    """The head of a journal whose manager was killed: a pid that has ended."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    return {"kind": "run", "run_id": run_id, "pid": gone.pid, "start_time": 0, "run_dir": str(run_dir)}


def write_journal(path: Path, records: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.writelines(json.dumps(record) + "\n" for record in records)
    return path


def canary(tmp_path: Path, name: str = "canary") -> tuple[Path, bytes]:
    path = tmp_path / "outside" / name
    path.parent.mkdir(exist_ok=True)
    text = f"not the run's: {secrets.token_hex(8)}\n".encode()
    path.write_bytes(text)
    return path, text


def add_netns(made: dict, name: str) -> int:
    subprocess.run(["ip", "netns", "add", name], check=True)
    made["netns"].append(name)
    return os.stat(f"/run/netns/{name}").st_ino


def add_link(made: dict, name: str) -> None:
    # A bridge: this kernel has no dummy links, and a bridge needs no peer.
    subprocess.run(["ip", "link", "add", name, "type", "bridge"], check=True)
    made["links"].append(name)


def link_exists(name: str) -> bool:
    return os.path.exists(f"/sys/class/net/{name}")


def start_sleep(made: dict, netns: str | None = None) -> subprocess.Popen:
    prefix = ["ip", "netns", "exec", netns] if netns else []
    proc = subprocess.Popen([*prefix, "sleep", "120"], start_new_session=True)
    made["procs"].append(proc)
    return proc


def alive(proc: subprocess.Popen) -> bool:
    return proc.poll() is None


def assert_refused(result: subprocess.CompletedProcess, run_id: str, *why: str) -> None:
    assert result.returncode == 1, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"collapsar: cleanup {run_id}: refused, nothing removed: "), lines[0]
    for part in why:
        assert part in lines[0], lines[0]
    assert "removed" not in result.stdout and "deleted" not in result.stdout, result.stdout


def test_a_journal_in_the_current_directory_is_never_read(tmp_path, state, run_id, made):
    """The reported attack: ./RUNID/journal.jsonl made `cleanup RUNID` delete a link."""
    victim = f"h2cwd{os.getpid() % 10000}"
    add_link(made, victim)
    cwd = tmp_path / "cwd"
    write_journal(
        cwd / run_id / "journal.jsonl", [dead_manager(run_id, cwd / run_id), {"kind": "bridge", "name": victim}]
    )
    by_id = cleanup(state, run_id, cwd=cwd)
    assert by_id.returncode == 1 and link_exists(victim)
    assert by_id.stderr == (
        f"collapsar: cleanup {run_id}: no such run; expected a run id from "
        f"{state / 'journals'} (active or stale: none) or the directory of one of those runs\n"
    )
    by_path = cleanup(state, f"./{run_id}", cwd=cwd)
    assert by_path.returncode == 1 and link_exists(victim)
    assert by_path.stderr == (
        f"collapsar: cleanup ./{run_id}: {(cwd / run_id).resolve()} is not the run "
        f"directory of any run in {state / 'index'}; cleanup reads journals only "
        f"from {state / 'journals'}\n"
    )


def test_a_hosts_record_outside_the_runs_etc_netns_is_refused(tmp_path, state, run_id, made):
    outside, text = canary(tmp_path)
    # The hosts file of another run's namespace, which this run must not touch either.
    other = Path(f"/etc/netns/cx-{secrets.token_hex(3)}-a")
    other.mkdir(parents=True)
    made["paths"] += [other, other / "hosts"]
    (other / "hosts").write_bytes(text)
    ns = f"cx-{run_id}-a"
    Path(f"/etc/netns/{ns}").mkdir()  # so that a path through it resolves
    made["paths"].append(Path(f"/etc/netns/{ns}"))
    for path, why in (
        (str(outside), f"hosts record {str(outside)!r}"),
        (f"/etc/netns/{ns}/../../..{outside}", "hosts record '/etc/netns/"),
        (str(other / "hosts"), f"hosts record '{other}/hosts'"),
    ):
        journal = write_journal(
            state / "journals" / f"{run_id}.jsonl",
            [
                dead_manager(run_id, tmp_path),
                {"kind": "netns", "name": ns, "instance": "a"},
                {"kind": "hosts", "path": path},
            ],
        )
        assert_refused(cleanup(state, run_id), run_id, f"{journal}:3: ", why, f"expected /etc/netns/{ns}/hosts")
        assert outside.read_bytes() == text and (other / "hosts").read_bytes() == text
        journal.unlink()


@pytest.mark.parametrize("kind", ["veth", "bridge"])
def test_a_link_the_run_did_not_create_is_refused(tmp_path, state, run_id, made, kind):
    # Named like another run's link, and like any other link of the host.
    foreign = [f"cx{secrets.token_hex(3)}{'v1' if kind == 'veth' else 'br'}", f"h2keep{os.getpid() % 10000}"]
    for name in foreign:
        add_link(made, name)
    expected = f"cx{run_id}v1" if kind == "veth" else f"cx{run_id}br"
    for name in foreign:
        journal = write_journal(
            state / "journals" / f"{run_id}.jsonl",
            [
                dead_manager(run_id, tmp_path),
                {"kind": "netns", "name": f"cx-{run_id}-a", "instance": "a"},
                {"kind": kind, "name": name, "instance": "a"},
            ],
        )
        assert_refused(
            cleanup(state, run_id), run_id, f"{journal}:3: {kind} record {name!r}: not", f"expected {expected}"
        )
        assert all(link_exists(link) for link in foreign)
        journal.unlink()


def test_a_process_the_run_did_not_start_is_refused_and_nothing_else_is_removed(tmp_path, state, run_id, made):
    ns = f"cx-{run_id}-a"
    inode = add_netns(made, ns)  # the run's own namespace: valid, but must stay (nothing half-applied)
    foreign = start_sleep(made)  # the test's own process, in the host's namespace
    start = process_start_time(foreign.pid)
    journal = write_journal(
        state / "journals" / f"{run_id}.jsonl",
        [
            dead_manager(run_id, tmp_path),
            {"kind": "netns", "name": ns, "instance": "a"},
            {"kind": "netns_inode", "name": ns, "inode": inode},
            {"kind": "process", "instance": "a", "pid": foreign.pid, "start_time": start},
        ],
    )
    assert_refused(
        cleanup(state, run_id),
        run_id,
        f"{journal}:4: process record pid {foreign.pid} (instance a): it is not in the run's namespace {ns}",
    )
    assert alive(foreign) and os.stat(f"/run/netns/{ns}").st_ino == inode


def test_a_namespace_name_outside_run_netns_is_refused(tmp_path, state, run_id, made):
    bystander = f"h2keep{os.getpid() % 10000}"
    inode = add_netns(made, bystander)
    inside = start_sleep(made, bystander)
    outside, text = canary(tmp_path)
    for name in (f"/run/netns/{bystander}", f"../../..{outside}", f"cx-{run_id}-a/../{bystander}"):
        journal = write_journal(
            state / "journals" / f"{run_id}.jsonl",
            [
                dead_manager(run_id, tmp_path),
                {"kind": "netns", "name": name, "instance": "a"},
                {"kind": "netns_inode", "name": name, "inode": inode},
            ],
        )
        assert_refused(
            cleanup(state, run_id),
            run_id,
            f"{journal}:2: netns record {name!r} (instance a): not a namespace of run {run_id}; expected cx-{run_id}-a",
        )
        assert os.stat(f"/run/netns/{bystander}").st_ino == inode and alive(inside)
        assert outside.read_bytes() == text
        journal.unlink()


def test_a_symlinked_journal_is_refused(tmp_path, state, run_id, made):
    outside, text = canary(tmp_path)
    crafted = write_journal(
        tmp_path / "crafted.jsonl", [dead_manager(run_id, tmp_path), {"kind": "hosts", "path": str(outside)}]
    )
    link = state / "journals" / f"{run_id}.jsonl"
    link.symlink_to(crafted)
    assert_refused(cleanup(state, run_id), run_id, f"journal {link}: a symlink; expected a regular file")
    assert outside.read_bytes() == text


@pytest.mark.parametrize(
    "owner, mode, why",
    [
        (NOBODY, 0o600, f"owned by uid {NOBODY}; expected root"),
        (0, 0o666, "writable by group or others (mode 0666); expected 0600"),
    ],
)
def test_a_journal_others_could_write_is_refused(tmp_path, state, run_id, owner, mode, why):
    outside, text = canary(tmp_path)
    journal = write_journal(
        state / "journals" / f"{run_id}.jsonl",
        [dead_manager(run_id, tmp_path), {"kind": "hosts", "path": str(outside)}],
    )
    os.chown(journal, owner, -1)
    os.chmod(journal, mode)
    assert_refused(cleanup(state, run_id), run_id, f"journal {journal}: {why}")
    assert outside.read_bytes() == text


def test_a_run_directory_replaced_by_a_symlink_is_not_written_through(tmp_path, state, run_id, made):
    """The state journal is the run's own and valid, so its leftovers go; but
    its run directory was swapped for a symlink to somewhere else whose
    journal.jsonl.tmp points at a file the journal would be copied over."""
    ns = f"cx-{run_id}-a"
    add_netns(made, ns)
    base = tmp_path / "runs"
    real = base / run_id
    real.mkdir(parents=True, mode=0o700)
    identity = os.stat(real)
    write_journal(
        state / "journals" / f"{run_id}.jsonl",
        [
            {**dead_manager(run_id, real), "run_dir_dev": identity.st_dev, "run_dir_ino": identity.st_ino},
            {"kind": "netns", "name": ns, "instance": "a"},
        ],
    )
    (state / "index").mkdir()
    (state / "index" / run_id).symlink_to(real)
    outside, text = canary(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "journal.jsonl.tmp").symlink_to(outside)
    (elsewhere / "journal.jsonl").symlink_to(outside)
    real.rename(tmp_path / "moved-away")
    real.symlink_to(elsewhere)
    result = cleanup(state, run_id)
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert f"{run_id}: deleted netns {ns}" in result.stdout and not os.path.exists(f"/run/netns/{ns}")
    assert result.stderr == (
        f"collapsar: cleanup {run_id}: leftovers removed, but {real} is not the run "
        f"directory the run created (replaced or a symlink); its journal was not "
        f"copied there\n"
    )
    assert outside.read_bytes() == text
    assert (elsewhere / "journal.jsonl").is_symlink() and (elsewhere / "journal.jsonl.tmp").is_symlink()
    assert not (state / "journals" / f"{run_id}.jsonl").exists() and not (state / "index" / run_id).exists()


@pytest.mark.parametrize(
    "owner, mode, why",
    [
        (NOBODY, 0o755, f"owned by uid {NOBODY}; expected root; fix: chown root "),
        (
            0,
            0o777,
            "writable by group or others (mode 0777); expected a directory only root can write; fix: chmod go-w ",
        ),
    ],
)
def test_a_state_directory_others_control_is_refused(tmp_path, state, run_id, made, owner, mode, why):
    outside, text = canary(tmp_path)
    write_journal(
        state / "journals" / f"{run_id}.jsonl",
        [dead_manager(run_id, tmp_path), {"kind": "hosts", "path": str(outside)}],
    )
    os.chown(state, owner, -1)
    os.chmod(state, mode)
    result = cleanup(state, run_id)
    assert result.returncode == 3, result.stderr
    assert result.stderr == f"collapsar: state directory {state}: {why}{state}\n"
    assert outside.read_bytes() == text


def test_a_journal_of_the_runs_own_records_is_cleaned(tmp_path, state, run_id, made):
    """The control: the same kinds of record, each the run's own, all go."""
    ns = f"cx-{run_id}-a"
    inode = add_netns(made, ns)
    hosts = Path(f"/etc/netns/{ns}/hosts")
    hosts.parent.mkdir(parents=True)
    made["paths"] += [hosts.parent, hosts]
    hosts.write_text("127.0.0.1\tlocalhost\n")
    for link in (f"cx{run_id}br", f"cx{run_id}v1"):
        add_link(made, link)
    inside = start_sleep(made, ns)
    journal = write_journal(
        state / "journals" / f"{run_id}.jsonl",
        [
            dead_manager(run_id, tmp_path),
            {"kind": "bridge", "name": f"cx{run_id}br"},
            {"kind": "netns", "name": ns, "instance": "a"},
            {"kind": "netns_inode", "name": ns, "inode": inode},
            {"kind": "hosts", "path": str(hosts)},
            {"kind": "veth", "name": f"cx{run_id}v1", "instance": "a"},
            {"kind": "process", "instance": "a", "pid": inside.pid, "start_time": process_start_time(inside.pid)},
        ],
    )
    result = cleanup(state, run_id)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"{run_id}: killed pid {inside.pid} (a)",
        f"{run_id}: deleted link cx{run_id}v1",
        f"{run_id}: deleted link cx{run_id}br",
        f"{run_id}: deleted netns {ns}",
        f"{run_id}: removed {hosts}",
        f"{run_id}: clean (5 leftovers removed)",
    ]
    assert inside.wait(5) == -signal.SIGKILL
    assert not os.path.exists(f"/run/netns/{ns}") and not hosts.parent.exists()
    assert not link_exists(f"cx{run_id}br") and not link_exists(f"cx{run_id}v1")
    assert not journal.exists()


def test_all_stale_cleans_the_runs_own_journals_and_refuses_the_crafted_one(tmp_path, state, made):
    good, crafted = sorted(secrets.token_hex(3) for _ in range(2))
    ns = f"cx-{good}-a"
    add_netns(made, ns)
    write_journal(
        state / "journals" / f"{good}.jsonl",
        [dead_manager(good, tmp_path), {"kind": "netns", "name": ns, "instance": "a"}],
    )
    outside, text = canary(tmp_path)
    journal = write_journal(
        state / "journals" / f"{crafted}.jsonl",
        [dead_manager(crafted, tmp_path), {"kind": "hosts", "path": str(outside)}],
    )
    result = cleanup(state, "--all-stale")
    assert result.returncode == 1
    assert result.stdout.splitlines() == [f"{good}: deleted netns {ns}", f"{good}: clean (1 leftovers removed)"]
    assert result.stderr == (
        f"collapsar: cleanup {crafted}: refused, nothing removed: {journal}:2: hosts record "
        f"{str(outside)!r}: not a hosts file of run {crafted}; expected the hosts file of a "
        f"recorded namespace (there is none)\n"
    )
    assert outside.read_bytes() == text and journal.exists()
    assert not os.path.exists(f"/run/netns/{ns}") and not (state / "journals" / f"{good}.jsonl").exists()
