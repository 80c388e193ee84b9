"""Hostile workloads against the files the manager writes into containers
(hostsfile.py, inroot.py), on Compose.

The manager runs in the host's PID namespace, so /proc/2/root in its view
is the host's root (kthreadd's, on every Linux; init's may be out of its
reach where init holds capabilities the manager lacks, as on this VM).  A
workload, root in its container, plants links to there from the two files
the manager writes, before the manager gets to them: `links` makes its
/tmp/collapsar-shaped one (and adds a line that is no UTF-8 to its
/etc/hosts, which made the manager crash at its next rewrite); `jail`
chroots its main process into a directory of its own (/proc/PID/root is
then that directory) whose etc/hosts is one; `fifo` does the same with
FIFOs, which would block the manager.  Their targets are canaries on the
host, made here (with bytes that are no UTF-8 either).

Afterwards the canaries must be byte for byte what they were, no other
file named like them may have appeared, and the run must still shape every
container, name every instance in the others' /etc/hosts (also after the
join at 3 s rewrites them all) and start their commands; each refused file
is one warning in the manager's log, however many rewrites it refuses."""

from __future__ import annotations

import os
import secrets

import pytest
import yaml
from dockerlib import collapsar, collapsar_processes, docker, labelled_containers, run, status, wait_for, wait_listening
from scenario import check_rates

from collapsar.manager.container import hostsfile
from collapsar.parser import parse_file
from collapsar.timeline import build_timeline

PROJECT = "cxhostile"
IPERF_PORT = 5201
JOIN_AT_S = 3
ODD_LINE, ODD_LINE_SH = b"10.9.9.9\tcaf\xe9\n", r"10.9.9.9\tcaf\351\n"  # Latin-1, as written by printf
CANARY_BYTES = b"root:$6$collapsar-canary$untouched:19000:0:99999:7:::\n\x00\xff binary tail\n"


@pytest.fixture
def canaries():
    """Two host files the hostile containers aim at, and the prefix they share."""
    prefix = f"/tmp/collapsar-canary-{secrets.token_hex(4)}"
    paths = {what: f"{prefix}-{what}" for what in ("hosts", "mark")}
    for path in paths.values():
        with open(path, "wb") as handle:
            handle.write(CANARY_BYTES)
    yield prefix, paths
    for path in paths.values():
        os.unlink(path)


@pytest.fixture
def hostile_image(images, canaries, tmp_path):
    """The workload image with the links and FIFOs in place, so they are
    there before the container starts: no race with the manager."""
    from collapsar.deploy.naming import IMAGE_NODE

    _, paths = canaries
    tag = f"collapsar-test/hostile:{secrets.token_hex(4)}"
    context = tmp_path / "hostile-image"
    context.mkdir()
    (context / "Dockerfile").write_text(f"""FROM {IMAGE_NODE}
RUN set -e; for jail in /jail /fifojail; do \\
      mkdir -p $jail/etc $jail/tmp $jail/bin; cp /bin/sleep $jail/bin/; \\
      for lib in $(ldd /bin/sleep | grep -o '/[^ ]*'); do mkdir -p $jail$(dirname $lib); cp $lib $jail$lib; done; \\
    done; \\
    ln -s /proc/2/root{paths["mark"]} /tmp/collapsar-shaped; \\
    ln -s /proc/2/root{paths["hosts"]} /jail/etc/hosts; \\
    mkfifo /fifojail/etc/hosts /fifojail/tmp/collapsar-shaped
""")
    run("docker", "build", "-q", "-t", tag, str(context), timeout=300)
    yield tag
    run("docker", "rmi", tag, check=False)


def write_topology(path, image: str) -> None:
    path.write_text(
        yaml.safe_dump(
            {
                "experiment": {"name": "hostile"},
                "services": {
                    "server": {"command": ["iperf3", "--server"]},
                    "client": {"command": ["iperf3", "--server"]},
                    "links": {
                        "image": image,
                        "command": ["sh", "-c", f"printf '{ODD_LINE_SH}' >> /etc/hosts; exec sleep infinity"],
                    },
                    "jail": {"image": image, "command": ["chroot", "/jail", "/bin/sleep", "infinity"]},
                    "fifo": {"image": image, "command": ["chroot", "/fifojail", "/bin/sleep", "infinity"]},
                    "late": {"command": ["iperf3", "--server"], "replicas": 0},
                },
                "bridges": ["s1"],
                "links": [
                    {"from": name, "to": "s1", "bandwidth": f"{rate}Mbps"}
                    for name, rate in (
                        ("server", 20),
                        ("client", 40),
                        ("links", 10),
                        ("jail", 10),
                        ("fifo", 10),
                        ("late", 15),
                    )
                ],
                "events": [{"at": f"{JOIN_AT_S}s", "service": "late", "action": "join"}],
            }
        )
    )


def test_links_and_fifos_planted_by_containers_change_nothing_outside_them(tmp_path, hostile_image, canaries):
    prefix, paths = canaries
    topology, compose = tmp_path / "hostile.yaml", tmp_path / "compose.yml"
    write_topology(topology, hostile_image)
    done = collapsar("generate", str(topology), "--compose", "-o", str(compose))
    assert (done.returncode, done.stderr) == (0, "")
    experiment = yaml.safe_load(compose.read_text())["networks"]["collapsar"]["labels"]["org.collapsar.experiment"]
    base = ("docker-compose", "-p", PROJECT, "-f", str(compose))
    assert not collapsar_processes(), "a Collapsar manager is already running on this host"
    run(*base, "up", "-d")
    try:
        snapshot = wait_for("every instance shaped, late joined", lambda: _all_shaped(experiment), 120)
        by_name = {i["name"]: i for i in snapshot["instances"]}
        check_rates(snapshot, build_timeline(parse_file(topology)))
        wait_listening(by_name["server"]["container"], (IPERF_PORT,))  # marked, so its command started
        wait_listening(by_name["late"]["container"], (IPERF_PORT,))
        ip_of = {name: inst["ip"] for name, inst in by_name.items()}
        wait_for(
            "every instance named in the server's and late's /etc/hosts",
            lambda: all(_resolved(by_name[where]["container"], ip_of) for where in ("server", "late")),
            15,
        )
        # A few rescans (every 2 s) after the join's rewrite: refusals are
        # not retried and said again at every scan or period.
        wait_for("t >= 10 s", lambda: (s := status()) and s["t_us"] >= 10_000_000, 30)

        for what, path in paths.items():
            with open(path, "rb") as handle:
                assert handle.read() == CANARY_BYTES, f"the host's {what} canary was written through a link"
        assert sorted(f"/tmp/{n}" for n in os.listdir("/tmp") if f"/tmp/{n}".startswith(prefix)) == sorted(
            paths.values()
        )
        # The planted files are still what the containers made them.
        assert (
            docker("exec", by_name["links"]["container"], "readlink", "/tmp/collapsar-shaped").strip()
            == f"/proc/2/root{paths['mark']}"
        )
        assert (
            docker("exec", by_name["jail"]["container"], "readlink", "/jail/etc/hosts").strip()
            == f"/proc/2/root{paths['hosts']}"
        )
        assert docker(
            "exec",
            by_name["fifo"]["container"],
            "stat",
            "-c",
            "%F",
            "/fifojail/etc/hosts",
            "/fifojail/tmp/collapsar-shaped",
        ).split() == ["fifo", "fifo"]
        with open(f"/proc/{by_name['links']['pid']}/root/etc/hosts", "rb") as handle:
            odd = handle.read()
        assert odd.count(ODD_LINE) == 1 and odd.count(hostsfile.BEGIN.encode()) == 1
        assert f"{ip_of['late']}\tlate\n".encode() in odd
        # The jail's own tmp is a plain directory: its mark is written there.
        assert docker("exec", by_name["jail"]["container"], "cat", "/jail/tmp/collapsar-shaped") == "shaped\n"

        pid = {name: inst["pid"] for name, inst in by_name.items()}
        warnings = [
            line
            for line in docker("logs", f"{PROJECT}_collapsar-manager_1").splitlines()
            if line.startswith("warning: ") and "throughput" not in line
        ]
        assert sorted(warnings) == sorted(
            [
                f"warning: fifo: cannot mark it shaped: /proc/{pid['fifo']}/root/tmp/collapsar-shaped is a FIFO, "
                "not a regular file",
                f"warning: fifo: instance names not written to /etc/hosts: /proc/{pid['fifo']}/root/etc/hosts is a "
                "FIFO, not a regular file",
                f"warning: jail: instance names not written to /etc/hosts: /proc/{pid['jail']}/root/etc/hosts is a "
                "symbolic link, not a regular file",
                f"warning: links: cannot mark it shaped: /proc/{pid['links']}/root/tmp/collapsar-shaped is a "
                "symbolic link, not a regular file",
            ]
        )
    finally:
        run(*base, "down", "-t", "2")
        wait_for("every container of the experiment removed", lambda: not labelled_containers(experiment), 90)
        wait_for("no Collapsar process left", lambda: not collapsar_processes(), 30)
    assert not docker("network", "ls", "-q", "--filter", f"label=org.collapsar.experiment={experiment}").split()


def _all_shaped(experiment: str):
    snapshot = status()
    if (
        snapshot
        and snapshot.get("run_id") == experiment
        and snapshot["t_us"] >= JOIN_AT_S * 1_000_000
        and all(i["shaped"] for i in snapshot["instances"])
    ):
        return snapshot
    return None


def _resolved(container: str, ip_of: dict[str, str]) -> bool:
    answer = run("docker", "exec", container, "getent", "hosts", *sorted(ip_of), check=False).stdout.split()
    return dict(zip(answer[1::2], answer[0::2])) == ip_of
