"""Where a node stores, against a planted symlink: nodes run as root here,
so each test plants the link or file an unprivileged user could plant in a
shared temporary directory and checks that a canary it points at stays
unchanged.  The old default, /tmp/wl-node.storage, was one fixed name for
every node on the host, opened with O_CREAT and following symlinks."""

import os
import socket
import stat
import subprocess

import wl_wire as wire
from wl_support import sanitizer_env

CANARY = b"canary: must stay unchanged\n"


def store(node, nbytes=8192):
    with socket.create_connection(("127.0.0.1", node.port)) as s:
        s.settimeout(10)
        s.sendall(wire.request(wire.chain(wire.op_io(wire.STORE, 0, nbytes)), req_id=1))
        assert wire.read_reply(s) == (1, wire.OK, 48)


def refused_start(binaries, *args, tmpdir):
    """Run a node that must refuse to start; return its stderr."""
    env = {**sanitizer_env(), "TMPDIR": str(tmpdir)}
    proc = subprocess.run(
        [str(binaries["node"]), "-b", "127.0.0.1:0", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=20,
        env=env,
    )
    assert proc.returncode == 1, proc.stderr
    assert "Sanitizer" not in proc.stderr and "listening" not in proc.stderr
    return proc.stderr


def canary(tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    path = victim / "precious"
    path.write_bytes(CANARY)
    return victim, path


def test_default_file_is_private_per_instance_and_removed_at_exit(start_node, tmp_path):
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    nodes = [start_node(storage=False, env={"TMPDIR": str(tmpdir)}) for _ in range(2)]
    home = tmpdir / f"wl-node-{os.geteuid()}"
    files = [home / f"{node.proc.pid}.storage" for node in nodes]
    for node in nodes:
        store(node)
    assert stat.S_IMODE(home.lstat().st_mode) == 0o700
    for path in files:
        st = path.lstat()
        assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600 and st.st_size == 8192
    for node in nodes:
        assert node.stop() == 0
    assert os.listdir(home) == []


def test_planted_directory_symlink_is_refused(binaries, tmp_path):
    victim, precious = canary(tmp_path)
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    (tmpdir / f"wl-node-{os.geteuid()}").symlink_to(victim)
    err = refused_start(binaries, tmpdir=tmpdir)
    assert "is a symlink or not a directory" in err
    assert precious.read_bytes() == CANARY and os.listdir(victim) == ["precious"]


def test_directory_others_can_write_is_refused(binaries, tmp_path):
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    home = tmpdir / f"wl-node-{os.geteuid()}"
    home.mkdir()
    home.chmod(0o777)  # anyone could plant PID.storage -> elsewhere in it
    err = refused_start(binaries, tmpdir=tmpdir)
    assert "mode 777" in err and os.listdir(home) == []


def test_directory_of_another_user_is_refused(binaries, tmp_path):
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    home = tmpdir / f"wl-node-{os.geteuid()}"
    home.mkdir(mode=0o700)
    os.chown(home, 65534, 65534)  # planted by nobody before the node first ran
    err = refused_start(binaries, tmpdir=tmpdir)
    assert "belongs to uid 65534" in err


def test_given_path_that_is_a_symlink_is_not_followed(binaries, tmp_path):
    _, precious = canary(tmp_path)
    link = tmp_path / "store"
    link.symlink_to(precious)
    err = refused_start(binaries, "-s", link, tmpdir=tmp_path)
    assert "is a symlink: refusing to follow it" in err
    assert precious.read_bytes() == CANARY


def test_given_file_with_a_second_hard_link_is_refused(binaries, tmp_path):
    _, precious = canary(tmp_path)
    alias = tmp_path / "store"
    os.link(precious, alias)
    err = refused_start(binaries, "-s", alias, tmpdir=tmp_path)
    assert "more than one hard link" in err
    assert precious.read_bytes() == CANARY


def test_given_file_of_another_user_is_refused(binaries, tmp_path):
    _, precious = canary(tmp_path)
    os.chown(precious, 65534, 65534)
    err = refused_start(binaries, "-s", precious, tmpdir=tmp_path)
    assert "belongs to another user" in err
    assert precious.read_bytes() == CANARY
