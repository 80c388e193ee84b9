"""Spans timed at the kernel's receive (workload-node/src/rxstamp.h): a
wake-up or a busy worker between a message's arrival and its read is a wait
at the reader, not network time.

client (2 pairs, sending at the same instants) -> front (one worker, a 15 ms
wall-clock compute, then a forward) -> db (a 5 ms one).  Of each pair's two
requests, front reads one and computes; the other waits in front's socket
meanwhile, and the first one's reply from db comes back while front computes
the second, so it waits in front's socket too (about 10 ms).  Timed at the
read, as before, those waits were network time on one hop or the other;
timed at the kernel's receive they are front's: the second request's in its
queueing (its serve starts before the read, by wl.socket_us), the first
one's reply in wl.reply.wait_us of its forward.send.  db's 5 ms, on a CPU
of its own, keep the second reply from arriving before front reads the
first: two replies read at once share one time, the later one's
(workload-node/README.md, Tracing), and on this 2-CPU machine a db computing
on front's CPU kept front from reading for as long.
"""

import json
import subprocess

import numpy as np
import pytest
import wl_otlp
from wl_support import sanitizer_env, trace_json

from collapsar.tracing.critical import NETWORK, REPLY_WAIT, WAIT, critical_paths
from collapsar.tracing.load import read_spans, span_files

PAIRS = 2
PER_PAIR = 15
REQUESTS = PAIRS * PER_PAIR
# Requests whose hop may still hold a wait: the first one's forward waits for
# front's connection to db, and on this shared 2-CPU machine a sender can be
# preempted inside its send (no transmit time is taken) or starved long enough
# to read two replies at once.  Timed at the read, about half of them did.
SLOW_HOPS = REQUESTS // 6
FRONT_US = 15000
DB_US = 5000
LATE_US = 0.6 * (FRONT_US - DB_US)  # a reply that waited for front's other compute


def env(run, instance):
    return {
        "COLLAPSAR_TRACE_DIR": str(run / "workload"),
        "COLLAPSAR_SERVICE": instance.split("-")[0],
        "COLLAPSAR_INSTANCE": instance,
        "COLLAPSAR_RUN_ID": "kernel-times",
    }


def spans_of(run, instance):
    return [span for _, _, span in wl_otlp.read_spans(run / "workload" / f"{instance}.spans.jsonl")]


def start_ns(span):
    return int(span["startTimeUnixNano"])


@pytest.mark.timing  # waits made by wall-clock computes on a shared host
def test_wake_ups_and_busy_workers_are_waits_not_network(binaries, start_node, tmp_path):
    run = tmp_path / "run"
    (run / "workload").mkdir(parents=True)
    db = start_node("-c", "1", env=env(run, "db-1"))
    front = start_node("-c", "0", env=env(run, "front-1"))
    client = subprocess.run(
        [
            str(binaries["client"]),
            "--to",
            front.addr,
            "-C",
            f"{FRONT_US}us,wall",
            "-F",
            db.addr,
            "-C",
            f"{DB_US}us,wall",
            "--fwd-end",
            "--nt",
            str(PAIRS),
            "-r",
            "10",
            "-n",
            str(PER_PAIR),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**sanitizer_env(), **env(run, "client-1")},
    )
    assert client.returncode == 0, client.stderr
    own = json.loads(client.stdout)
    assert own["ok"] == REQUESTS
    assert front.stop() == 0 and db.stop() == 0

    # The serve starts at the kernel's receive, before the read, by wl.socket_us.
    front_spans = spans_of(run, "front-1")
    serves = {s["spanId"]: s for s in front_spans if s["name"] == "serve"}
    computes = {s["parentSpanId"]: s for s in front_spans if s["name"] == "compute"}
    assert len(serves) == len(computes) == REQUESTS
    socket_us = []
    for span_id, serve in serves.items():
        waited, queued = serve["attrs"]["wl.socket_us"], serve["attrs"]["wl.queue_us"]
        assert 0 <= waited <= queued, serve
        read_ns = start_ns(serve) + waited * 1000  # the read; wl.socket_us is whole microseconds, rounded down
        assert start_ns(serve) <= read_ns <= start_ns(computes[span_id]), (serve, computes[span_id])
        socket_us.append(waited)
    # One request of each pair sat in the socket through the other's compute.
    assert np.count_nonzero(np.array(socket_us) >= 0.6 * FRONT_US) >= REQUESTS // 4, sorted(socket_us)
    sends = [s for s in front_spans if s["name"] == "forward.send"]
    assert len(sends) == REQUESTS and all(s["attrs"]["wl.reply.wait_us"] >= 0 for s in sends)
    requests = spans_of(run, "client-1")
    assert len(requests) == REQUESTS and all(s["attrs"]["wl.reply.wait_us"] >= 0 for s in requests)

    # Per request: each hop's network time is loopback's, the waits in front's sockets are front's.
    spans, _ = read_spans(span_files(run))
    paths = critical_paths(spans)
    assert paths.requests.complete.all() and len(paths.requests) == REQUESTS
    parts, names = paths.parts, spans.instances
    front_code = names.index("front-1")
    per_request = np.zeros((REQUESTS, 3), np.int64)  # network client -> front, network front -> db, front's wait
    for column, chosen in enumerate(
        (
            (parts.kind == NETWORK) & (parts.where == names.index("client-1")),
            (parts.kind == NETWORK) & (parts.where == front_code),
            (parts.kind == WAIT) & (parts.where == front_code),
        )
    ):
        np.add.at(per_request[:, column], parts.request[chosen], parts.ns[chosen])
    to_front, to_db, front_wait = (per_request[:, k] / 1e3 for k in range(3))  # us
    # Timed at the read, half the requests had 10-15 ms on one hop or the other.
    assert np.count_nonzero(to_front > 2000) <= SLOW_HOPS, np.sort(to_front)
    assert np.count_nonzero(to_db > 2000) <= SLOW_HOPS, np.sort(to_db)
    assert np.median(front_wait) >= LATE_US, np.sort(front_wait)
    replied_late = parts.ns[(parts.cause == REPLY_WAIT) & (parts.where == front_code)] / 1e3
    assert np.count_nonzero(replied_late >= LATE_US) >= REQUESTS // 4, np.sort(replied_late)
    sums = np.bincount(parts.request, weights=parts.ns, minlength=len(paths.requests))
    assert sums.astype(np.int64).tolist() == paths.requests.duration.tolist()

    # What collapsar trace says: loopback hops, the wait at front and the client's own.
    summary = trace_json(run)
    (mine,) = summary["clients"]
    # The latency is the application's: a request's span still ends at the client's read.
    assert abs(mine["p50_ms"] - own["latency_us"]["p50"] / 1000) <= 0.01 * mine["p50_ms"]
    rows = {(b["kind"], b.get("instance") or (b["from"], b["to"])): b for b in summary["breakdown"]}
    assert set(rows) == {
        ("network", ("client-1", "front-1")),
        ("wait", "front-1"),
        ("compute", "front-1"),
        ("network", ("front-1", "db-1")),
        ("wait", "db-1"),
        ("compute", "db-1"),
        ("wait", "client-1"),
    }
    for hop in (("client-1", "front-1"), ("front-1", "db-1")):
        assert 0 < rows[("network", hop)]["median_ms"] < 0.2, rows[("network", hop)]
    assert rows[("wait", "front-1")]["median_ms"] >= LATE_US / 1000, rows[("wait", "front-1")]
    client_wait = rows[("wait", "client-1")]
    assert client_wait["count"] == REQUESTS and client_wait["median_ms"] == client_wait["reply_median_ms"] < 1.0


REFUSE_TIMESTAMPS = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <sys/socket.h>

/* A kernel that refuses receive timestamps, for the process this is preloaded into. */
int setsockopt(int fd, int level, int name, const void *value, socklen_t len)
{
	static int (*real)(int, int, int, const void *, socklen_t);
	if (level == SOL_SOCKET && name == SO_TIMESTAMPNS) {
		errno = ENOPROTOOPT;
		return -1;
	}
	if (!real)
		real = (int (*)(int, int, int, const void *, socklen_t))dlsym(RTLD_NEXT, "setsockopt");
	return real(fd, level, name, value, len);
}
"""


def test_without_kernel_times_spans_are_timed_at_the_read(binaries, start_node, tmp_path):
    """The option refused: said once per process, and every span still valid, timed as before."""
    shim = tmp_path / "refuse.so"
    (tmp_path / "refuse.c").write_text(REFUSE_TIMESTAMPS)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(shim), str(tmp_path / "refuse.c"), "-ldl"], check=True)
    # The shim comes before the sanitizers' runtime: tell ASan that is meant.
    refused = {"LD_PRELOAD": str(shim), "ASAN_OPTIONS": sanitizer_env()["ASAN_OPTIONS"] + ":verify_asan_link_order=0"}
    run = tmp_path / "run"
    (run / "workload").mkdir(parents=True)
    db = start_node(env={**env(run, "db-1"), **refused})
    front = start_node(env={**env(run, "front-1"), **refused})
    client = subprocess.run(
        [
            str(binaries["client"]),
            "--to",
            front.addr,
            "-C",
            "100us,wall",
            "-F",
            db.addr,
            "-C",
            "100us,wall",
            "--fwd-end",
            "-r",
            "100",
            "-n",
            "20",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**sanitizer_env(), **env(run, "client-1"), **refused},
    )
    assert client.returncode == 0, client.stderr
    assert json.loads(client.stdout)["ok"] == 20
    assert front.stop() == 0 and db.stop() == 0
    for log in (client.stderr, front.log(), db.log()):
        said = [line for line in log.splitlines() if "SO_TIMESTAMPNS" in line]
        assert len(said) == 1 and "Protocol not available" in said[0], log
    serves = spans_of(run, "front-1") + spans_of(run, "db-1")  # read through the OTLP schema check
    assert len([s for s in serves if s["name"] == "serve"]) == 40
    assert {s["attrs"]["wl.socket_us"] for s in serves if s["name"] == "serve"} == {0}
    assert {s["attrs"]["wl.reply.wait_us"] for s in spans_of(run, "client-1")} == {0}
    summary = trace_json(run)
    assert summary["incomplete"] == 0 and summary["clients"][0]["by_status"]["ok"] == 20
