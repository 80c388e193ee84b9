"""Short transfers, timed the way a curl user sees them: connect, ask for N
bytes, read them all, close.  Used inside instances by bench/flows_bench.py.

    python3 flowtime.py serve PORT
    python3 flowtime.py fetch HOST PORT --sizes 10000,100000,1000000 --repeat 5 --parallel 8 --gap 0.5

`serve` answers each connection with as many bytes as its first 8 bytes
ask for (big-endian), then closes.  `fetch` runs --repeat rounds; in each,
for every size, --parallel transfers at once (threads), then waits --gap
seconds; it prints one JSON line per transfer: size, parallel, round,
seconds from connect() to the last byte.
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import sys
import threading
import time

CHUNK = 1 << 16
MAX_SIZE = 1 << 30


def serve(port: int) -> None:
    listener = socket.create_server(("0.0.0.0", port), backlog=64, reuse_port=True)
    payload = bytes(CHUNK)
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=_answer, args=(conn, payload), daemon=True).start()


def _answer(conn: socket.socket, payload: bytes) -> None:
    with conn:
        head = b""
        while len(head) < 8:
            more = conn.recv(8 - len(head))
            if not more:
                return
            head += more
        (size,) = struct.unpack(">Q", head)
        left = min(size, MAX_SIZE)
        while left:
            sent = conn.send(payload[: min(left, CHUNK)])
            left -= sent


def fetch_one(host: str, port: int, size: int) -> float:
    began = time.monotonic()
    with socket.create_connection((host, port), timeout=60) as conn:
        conn.sendall(struct.pack(">Q", size))
        got = 0
        while got < size:
            more = conn.recv(CHUNK)
            if not more:
                raise ConnectionError(f"closed after {got} of {size} bytes")
            got += len(more)
    return time.monotonic() - began


def fetch(host: str, port: int, sizes: list[int], repeat: int, parallel: int, gap_s: float) -> None:
    for round_ in range(repeat):
        for size in sizes:
            took: list[float | str] = [0.0] * parallel

            def one(i: int, size: int = size, took: list = took) -> None:
                try:
                    took[i] = fetch_one(host, port, size)
                except OSError as error:
                    took[i] = f"{type(error).__name__}: {error}"

            threads = [threading.Thread(target=one, args=(i,)) for i in range(parallel)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            for value in took:
                line = {"size": size, "parallel": parallel, "round": round_}
                line.update({"s": value} if isinstance(value, float) else {"error": value})
                print(json.dumps(line), flush=True)
            time.sleep(gap_s)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    s = sub.add_parser("serve")
    s.add_argument("port", type=int)
    f = sub.add_parser("fetch")
    f.add_argument("host")
    f.add_argument("port", type=int)
    f.add_argument("--sizes", default="10000,100000,1000000")
    f.add_argument("--repeat", type=int, default=5)
    f.add_argument("--parallel", type=int, default=1)
    f.add_argument("--gap", type=float, default=0.5)
    args = parser.parse_args()
    if args.what == "serve":
        serve(args.port)
        return 0
    fetch(args.host, args.port, [int(x) for x in args.sizes.split(",")], args.repeat, args.parallel, args.gap)
    return 0


if __name__ == "__main__":
    sys.exit(main())
