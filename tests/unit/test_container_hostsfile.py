"""The instance-name block of a container's /etc/hosts and the shaped mark
(hostsfile.py), and opening files inside a container's root (inroot.py).

The hostile cases use a real directory tree as the container's root, with
real symbolic links, FIFOs and files planted as a workload could, and a
canary outside it: the canary and the directory that holds it must come out
byte for byte as they went in."""

import errno
import os
import threading

import pytest

from collapsar.manager.container import hostsfile, inroot

DOCKER_HOSTS = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost\n10.0.0.7\tabc123def456\n"
NAMES = {"server": "10.0.0.3", "client-2": "10.0.0.5"}
BLOCK = hostsfile.BEGIN + "\n10.0.0.5\tclient-2\n10.0.0.3\tserver\n" + hostsfile.END + "\n"
CANARY = b"root:$6$canary:19000:0:99999:7:::\n"


def test_the_block_is_appended_and_docker_lines_are_kept():
    text = hostsfile.with_block(DOCKER_HOSTS, {"server": "10.0.0.3", "client-2": "10.0.0.5"})
    assert text == DOCKER_HOSTS + BLOCK


def test_a_second_block_replaces_the_first_wherever_it_was():
    once = hostsfile.with_block(DOCKER_HOSTS, {"server": "10.0.0.3"})
    moved = once + "10.0.0.9\tadded-by-the-user\n"
    twice = hostsfile.with_block(moved, {"server": "10.0.0.4", "late": "10.0.0.8"})
    assert twice.count(hostsfile.BEGIN) == 1 and "10.0.0.3" not in twice
    assert twice.startswith(DOCKER_HOSTS + "10.0.0.9\tadded-by-the-user\n" + hostsfile.BEGIN)
    assert twice.endswith("10.0.0.8\tlate\n10.0.0.4\tserver\n" + hostsfile.END + "\n")


def test_a_process_sharing_our_root_is_not_a_container_and_its_hosts_file_is_left_alone():
    before = open("/etc/hosts").read()
    assert hostsfile.update(os.getpid(), {"server": "10.0.0.3"}) is False
    assert open("/etc/hosts").read() == before


def test_a_gone_process_is_an_oserror():
    with pytest.raises(OSError):
        hostsfile.update(2**22 + 1, {"server": "10.0.0.3"})


def test_the_shaped_mark_is_not_written_outside_a_container(tmp_path):
    assert hostsfile.mark_shaped(os.getpid()) is False
    assert not os.path.exists(hostsfile.SHAPED_MARK)


# ---- a directory tree as the container's root ---------------------------------


@pytest.fixture
def box(tmp_path):
    """root/ (the container: etc/hosts as Docker writes it, an empty tmp/)
    and outside/ (the host: a canary file), with an O_PATH fd on root/."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    for folder in (root / "etc", root / "tmp", outside):
        folder.mkdir(parents=True)
    (root / "etc" / "hosts").write_text(DOCKER_HOSTS)
    (outside / "shadow").write_bytes(CANARY)
    fd = os.open(root, os.O_PATH | os.O_DIRECTORY)
    yield root, outside, fd
    os.close(fd)


def outside_untouched(outside) -> None:
    assert sorted(os.listdir(outside)) == ["shadow"]
    assert (outside / "shadow").read_bytes() == CANARY


def test_the_hosts_file_and_the_mark_are_written_in_a_plain_root(box):
    root, outside, fd = box
    hostsfile.rewrite_hosts(fd, "box", NAMES)
    hostsfile.write_mark(fd, "box")
    assert (root / "etc" / "hosts").read_text() == DOCKER_HOSTS + BLOCK
    assert (root / "tmp" / "collapsar-shaped").read_bytes() == b"shaped\n"
    assert os.stat(root / "tmp" / "collapsar-shaped").st_mode & 0o777 == 0o644 & ~_umask()


def test_a_mark_already_there_is_left_as_it_is_even_a_hard_link(box):
    root, outside, fd = box
    os.link(root / "etc" / "hosts", root / "tmp" / "collapsar-shaped")
    hostsfile.write_mark(fd, "box")
    assert (root / "etc" / "hosts").read_text() == DOCKER_HOSTS


@pytest.mark.parametrize("target", ["absolute", "relative"])
def test_a_mark_planted_as_a_link_to_a_host_file_is_refused(box, target):
    root, outside, fd = box
    link = str(outside / "shadow") if target == "absolute" else "../" * 12 + str(outside / "shadow")[1:]
    os.symlink(link, root / "tmp" / "collapsar-shaped")
    with pytest.raises(inroot.RefusedFile, match=r"^box/tmp/collapsar-shaped is a symbolic link, not a regular"):
        hostsfile.write_mark(fd, "box")
    outside_untouched(outside)


@pytest.mark.parametrize("target", ["absolute", "relative"])
def test_a_hosts_file_planted_as_a_link_to_a_host_file_is_refused(box, target):
    root, outside, fd = box
    (root / "etc" / "hosts").unlink()
    link = str(outside / "shadow") if target == "absolute" else "../" * 12 + str(outside / "shadow")[1:]
    os.symlink(link, root / "etc" / "hosts")
    with pytest.raises(inroot.RefusedFile, match=r"^box/etc/hosts is a symbolic link"):
        hostsfile.rewrite_hosts(fd, "box", NAMES)
    outside_untouched(outside)


@pytest.mark.parametrize("target", ["absolute", "relative"])
def test_a_directory_linked_out_of_the_root_resolves_inside_it(box, target):
    """etc -> the host's directory, then tmp -> the same: under
    RESOLVE_IN_ROOT the link names a path in the container.  There, the
    canary's directory is not there (etc); through tmp it is not there
    either, or, when it is under /tmp, it leads back to the link: a loop."""
    root, outside, fd = box
    link = str(outside) if target == "absolute" else "../" * 12 + str(outside)[1:]
    (outside / "hosts").write_bytes(CANARY)
    os.rename(root / "etc", root / "etc.real")
    os.symlink(link, root / "etc")
    with pytest.raises(FileNotFoundError):
        hostsfile.rewrite_hosts(fd, "box", NAMES)
    os.rename(root / "tmp", root / "tmp.real")
    os.symlink(link, root / "tmp")
    with pytest.raises(OSError) as raised:
        hostsfile.write_mark(fd, "box")
    assert raised.value.errno == (errno.ELOOP if str(outside).startswith("/tmp/") else errno.ENOENT)
    assert (outside / "hosts").read_bytes() == CANARY
    (outside / "hosts").unlink()
    outside_untouched(outside)


def test_an_absolute_link_inside_the_root_means_the_containers_own_path(box):
    root, outside, fd = box
    os.rename(root / "etc", root / "etc.real")
    os.symlink("/etc.real", root / "etc")
    hostsfile.rewrite_hosts(fd, "box", NAMES)
    assert (root / "etc.real" / "hosts").read_text() == DOCKER_HOSTS + BLOCK


def test_a_link_through_proc_is_refused_whatever_the_root():
    """/proc/self/root and its kind jump past any root: RESOLVE_NO_MAGICLINKS."""
    fd = os.open("/", os.O_PATH | os.O_DIRECTORY)
    try:
        with pytest.raises(OSError) as raised:
            inroot.open_regular(fd, "proc/self/root/etc/hostname", os.O_RDONLY, "/")
        assert raised.value.errno == errno.ELOOP
    finally:
        os.close(fd)


def test_a_device_is_refused_without_being_opened():
    fd = os.open("/", os.O_PATH | os.O_DIRECTORY)
    try:
        with pytest.raises(inroot.RefusedFile, match=r"^/dev/null is a character device, not a regular file$"):
            inroot.open_regular(fd, "dev/null", os.O_WRONLY, "")
    finally:
        os.close(fd)


@pytest.mark.parametrize("planted", ["etc/hosts", "tmp/collapsar-shaped"])
def test_a_fifo_is_refused_at_once_instead_of_blocking_the_manager(box, planted):
    root, outside, fd = box
    (root / planted).unlink(missing_ok=True)
    os.mkfifo(root / planted)
    failure: list[BaseException] = []

    def write() -> None:
        try:
            hostsfile.rewrite_hosts(fd, "box", NAMES) if planted == "etc/hosts" else hostsfile.write_mark(fd, "box")
        except BaseException as error:
            failure.append(error)

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    thread.join(5)
    if thread.is_alive():  # blocked on the FIFO: release it before failing
        os.close(os.open(root / planted, os.O_RDWR | os.O_NONBLOCK))
        pytest.fail(f"writing {planted} blocked on a FIFO")
    assert [str(error) for error in failure] == [f"box/{planted} is a FIFO, not a regular file"]


def test_a_directory_in_place_of_the_mark_is_refused(box):
    root, outside, fd = box
    (root / "tmp" / "collapsar-shaped").mkdir()
    with pytest.raises(inroot.RefusedFile, match=r"is a directory, not a regular file$"):
        hostsfile.write_mark(fd, "box")


def test_an_oversized_hosts_file_is_refused_and_left_alone(box):
    root, outside, fd = box
    stuffed = b"#" * hostsfile.MAX_HOSTS_BYTES + b"\n"
    (root / "etc" / "hosts").write_bytes(stuffed)
    with pytest.raises(inroot.RefusedFile) as raised:
        hostsfile.rewrite_hosts(fd, "box", NAMES)
    assert (raised.value.errno, str(raised.value)) == (
        errno.EFBIG,
        f"box/etc/hosts is {len(stuffed)} bytes, more than the 1048576 expected at most",
    )
    assert (root / "etc" / "hosts").read_bytes() == stuffed


def test_a_hosts_file_of_exactly_the_limit_is_rewritten(box):
    root, outside, fd = box
    full = b"#" * (hostsfile.MAX_HOSTS_BYTES - 1) + b"\n"
    (root / "etc" / "hosts").write_bytes(full)
    hostsfile.rewrite_hosts(fd, "box", NAMES)
    assert (root / "etc" / "hosts").read_bytes() == full + BLOCK.encode()


def test_bytes_that_are_no_utf8_are_kept_byte_for_byte(box):
    root, outside, fd = box
    odd = b"10.0.0.9\tcaf\xe9\n\xff\xfe junk\n"
    (root / "etc" / "hosts").write_bytes(odd)
    hostsfile.rewrite_hosts(fd, "box", NAMES)
    assert (root / "etc" / "hosts").read_bytes() == odd + BLOCK.encode()


def _umask() -> int:
    old = os.umask(0)
    os.umask(old)
    return old
