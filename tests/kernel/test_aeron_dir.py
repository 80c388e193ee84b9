"""The media driver's aeron dir and log against another user of the host.

/dev/shm is writable by everyone and the dir's name is predictable, while the
driver runs as root: another user (here `nobody`, really running the
commands) plants a symlink or a directory of their own where the dir or the
log will be, and the real MediaDriver must refuse it and leave the target
alone; a driver started even under umask 0 makes a dir only root can enter,
so `nobody` can neither list it, nor open its cnc.dat (which an Aeron client
must), nor plant anything in it."""

import os
import stat
import subprocess
import uuid

import pytest

from collapsar.manager.sharing.aeron import AeronError
from collapsar.manager.sharing.driver import MediaDriver

NOBODY = 65534


def as_nobody(*argv, check=True):
    return subprocess.run(
        argv, user=NOBODY, group=NOBODY, extra_groups=[], capture_output=True, text=True, check=check, timeout=60
    )


@pytest.fixture
def shm_paths():
    """Fresh paths in /dev/shm for a dir and its log; whatever ends up there
    (the attacker's plants included) is removed by path afterwards."""
    base = f"/dev/shm/cx-attack-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    paths = (base + "-aeron", base + "-aeron.log")
    yield paths
    for path in paths:
        if os.path.islink(path) or os.path.isfile(path):
            os.unlink(path)
        elif os.path.isdir(path):
            subprocess.run(["rm", "-rf", "--one-file-system", path], check=True)


@pytest.fixture
def victim(tmp_path):
    """A directory and a file the attacker would like root to write or delete."""
    place = tmp_path / "victim"
    place.mkdir()
    (place / "precious").write_text("precious\n")
    return place


def test_a_symlink_planted_where_the_dir_goes_is_refused(shm_paths, victim):
    aeron_dir, log = shm_paths
    as_nobody("ln", "-s", str(victim), aeron_dir)
    driver = MediaDriver(aeron_dir, log_path=victim.parent / "driver.log")
    with pytest.raises(AeronError, match=f"aeron dir {aeron_dir} is a symbolic link \\(to {victim}\\); refusing"):
        driver.start()
    assert driver.process is None  # no driver ever ran
    assert sorted(os.listdir(victim)) == ["precious"] and (victim / "precious").read_text() == "precious\n"
    assert os.path.islink(aeron_dir)  # not ours: left for its owner


def test_a_directory_planted_by_another_user_is_refused(shm_paths, victim):
    aeron_dir, _ = shm_paths
    as_nobody("mkdir", "-m", "777", aeron_dir)
    as_nobody("ln", "-s", str(victim / "precious"), f"{aeron_dir}/cnc.dat")
    driver = MediaDriver(aeron_dir, log_path=victim.parent / "driver.log")
    with pytest.raises(AeronError, match=f"aeron dir {aeron_dir} belongs to uid {NOBODY}, not to this manager"):
        driver.start()
    assert driver.process is None
    assert (victim / "precious").read_text() == "precious\n"
    assert os.listdir(aeron_dir) == ["cnc.dat"]  # theirs, untouched


def test_a_symlink_planted_where_the_log_goes_is_refused(shm_paths, victim):
    aeron_dir, log = shm_paths
    as_nobody("ln", "-s", str(victim / "precious"), log)  # the default log path: beside the dir
    driver = MediaDriver(aeron_dir)
    assert str(driver.log_path) == log
    with pytest.raises(AeronError, match=f"media driver log {log}: a symbolic link, refused"):
        driver.start()
    assert driver.process is None
    assert (victim / "precious").read_text() == "precious\n"  # root appended nothing through it


def test_the_dir_is_root_only_even_under_umask_0_and_nobody_can_reach_into_it(shm_paths):
    aeron_dir, log = shm_paths
    driver = MediaDriver(aeron_dir)
    old_umask = os.umask(0)  # a manager started carelessly: the driver must not inherit it
    try:
        driver.start()
    finally:
        os.umask(old_umask)
    try:
        st = os.lstat(aeron_dir)
        assert (stat.S_ISDIR(st.st_mode), st.st_uid, stat.S_IMODE(st.st_mode)) == (True, os.geteuid(), 0o700)
        assert stat.S_IMODE(os.stat(f"{aeron_dir}/cnc.dat").st_mode) & 0o077 == 0
        assert stat.S_IMODE(os.stat(log).st_mode) == 0o600
        # What an Aeron client of another user would have to do first: open cnc.dat.
        for argv in (["ls", aeron_dir], ["cat", f"{aeron_dir}/cnc.dat"], ["ln", "-s", "/etc", f"{aeron_dir}/x"]):
            attempt = as_nobody(*argv, check=False)
            assert attempt.returncode != 0 and "Permission denied" in attempt.stderr, (argv, attempt.stderr)
    finally:
        driver.stop()
    assert not os.path.exists(aeron_dir)
