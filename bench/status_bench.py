"""What serving the status API costs the manager's timeline: wake-up
lateness of a real-time Python thread while the API serves streams and
holds idle connections.

The timeline's thread prepares each step in Python, so after each wake-up
it needs the interpreter lock; whatever else the manager runs competes for
it.  Here a SCHED_FIFO thread (the timeline's priority) wakes every 10 ms
and records how late it ran, in a process whose StatusServer serves
`--streams` server-sent-event clients and holds `--idle` connections that
never send a byte, while a loop publishes a 30-instance snapshot every
50 ms (the manager's period), with the interpreter's switch interval
`collapsar run` sets.  The clients live in a child process, so only the
server's side of the work is in this one.  Rounds without clients and
with them alternate; each line is one round.

    python bench/status_bench.py --repeat 3
    python bench/status_bench.py --streams 64 --idle 1000
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from collapsar.manager.play.scheduler import percentile  # noqa: E402
from collapsar.manager.status.api import StatusBoard, StatusServer  # noqa: E402

SWITCH_INTERVAL_S = 0.0005  # as collapsar run sets it (emulation-manager/local/run.py)
CLIENTS = r"""
import selectors, socket, sys
port, streams, idle = map(int, sys.argv[1:4])
held = [socket.create_connection(("127.0.0.1", port)) for _ in range(idle)]
selector = selectors.DefaultSelector()
for _ in range(streams):
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(b"GET /stream HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
    selector.register(sock, selectors.EVENT_READ)
print("attached", flush=True)
while True:  # read everything, until the parent ends this process
    for key, _ in selector.select():
        if not key.fileobj.recv(1 << 16):
            selector.unregister(key.fileobj)
"""


def snapshot(t_us: int) -> dict:
    return {
        "t_us": t_us,
        "state": "running",
        "instances": [
            {"name": f"node-{i}", "ip": f"10.77.0.{i + 2}", "status": "up", "network": "up", "pid": 1000 + i}
            for i in range(30)
        ],
        "throughput": [
            {"src": f"node-{i}", "dst": f"node-{i + 1}", "bytes": 10**6 * i, "rate_bps": 8 * 10**6} for i in range(29)
        ],
    }


def wakeups(count: int, period_ns: int) -> list[int]:
    """Lateness (us) of `count` wake-ups of a real-time thread."""
    late: list[int] = []

    def body() -> None:
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
        except PermissionError:
            print("note: not root, so not SCHED_FIFO: figures include ordinary scheduling")
        deadline = time.monotonic_ns()
        for _ in range(count):
            deadline += period_ns
            while (left := deadline - time.monotonic_ns()) > 0:
                time.sleep(left / 1e9)
            late.append((time.monotonic_ns() - deadline) // 1000)

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    return late


def one_round(streams: int, idle: int, seconds: float) -> str:
    board = StatusBoard()
    board.publish(snapshot(0))
    server = StatusServer(board, 0).start()
    clients = subprocess.Popen(
        [sys.executable, "-c", CLIENTS, str(server.port), str(streams), str(idle)], stdout=subprocess.PIPE, text=True
    )
    stop = threading.Event()

    def loop() -> None:
        t_us = 0
        while not stop.wait(0.05):
            t_us += 50_000
            board.publish(snapshot(t_us))

    try:
        assert clients.stdout.readline().strip() == "attached"
        publisher = threading.Thread(target=loop)
        publisher.start()
        late = wakeups(int(seconds * 100), 10_000_000)
        stop.set()
        publisher.join()
    finally:
        clients.kill()
        clients.wait()
        board.close()
        server.stop()
    published = board.snapshot()[0]
    return (
        f"streams {streams:3d} idle {idle:4d}: lateness p50 {percentile(late, 0.5):5d} p99 "
        f"{percentile(late, 0.99):6d} max {max(late):6d} us; {board.encodings} encodings "
        f"for {published} snapshots"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=50)
    parser.add_argument("--idle", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=8.0, help="per round (default: %(default)s)")
    parser.add_argument("--repeat", type=int, default=2, help="rounds of each kind (default: %(default)s)")
    args = parser.parse_args()
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    for _ in range(args.repeat):
        print(one_round(0, 0, args.seconds), flush=True)
        print(one_round(args.streams, args.idle, args.seconds), flush=True)


if __name__ == "__main__":
    main()
