"""`collapsar dashboard`: the web page for one or several running managers.

Serves the built page (dashboard/web/dist) at /dashboard/ and, in the same
shape a manager does, the merged status of every `--manager` (collapsar
.dashboard.aggregate).  Without `--manager` it follows the local runs that
are active on this host (their run directories name their status ports).
Bound to 127.0.0.1 unless `--bind` says otherwise.  `collapsar run
--dashboard` serves the same page from the run itself.
"""

from __future__ import annotations

import argparse
import signal
import time
from pathlib import Path


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--manager", action="append", default=[], metavar="URL",
                        help="Status URL of a manager (repeat for a multi-host run); default: the "
                             "local runs active on this host")
    parser.add_argument("--bind", default="127.0.0.1", metavar="ADDRESS",
                        help="Address to serve the page on (anything but loopback exposes it)")
    parser.add_argument("--port", type=int, default=8640, metavar="N",
                        help="Port to serve the page on (0: any free port)")
    parser.add_argument("--token", action="append", default=[], metavar="T",
                        help="Control token of the managers (one for all, or one per --manager); "
                             "then the page uses the token this command prints.  Without it, the "
                             "page's token goes to the managers as it is")


def local_managers() -> list[str]:
    """Status URLs of the runs active on this host, oldest first."""
    from ..manager.rundir import is_stale, list_runs, read_journal, state_dir

    urls = []
    for _, journal in sorted(list_runs(state_dir()).items()):
        records = read_journal(journal)
        if not records or is_stale(records):
            continue
        port_file = Path(records[0].get("run_dir", "")) / "status-port"
        if not port_file.is_file():
            continue
        urls.append(f"http://127.0.0.1:{int(port_file.read_text())}")
    return urls


def run(args: argparse.Namespace) -> int:
    from ..dashboard import assets_dir
    from ..dashboard.aggregate import Aggregator, manager_url
    from ..errors import CollapsarError
    from ..manager.control import new_token
    from ..manager.status import StatusBoard, StatusServer

    if not 0 <= args.port <= 65535:
        raise CollapsarError(f"--port {args.port}: expected 0 to 65535")
    urls = [manager_url(text) for text in args.manager] or local_managers()
    if not urls:
        raise CollapsarError("no --manager given and no local run is active on this host; pass "
                             "--manager http://127.0.0.1:PORT (collapsar run prints its status URL)")
    assets = assets_dir()
    board = StatusBoard()
    aggregator = Aggregator(urls, board, args.token or None, new_token() if args.token else None)
    try:
        server = StatusServer(board, args.port, bind=args.bind, control=aggregator,
                              topology=aggregator.topology, assets=assets)
    except OSError as error:
        raise CollapsarError(f"cannot serve on {args.bind}:{args.port}: {error.strerror}; "
                             "pick another --port (0: any free one)") from None
    aggregator.start()
    server.start()
    print(f"dashboard: http://{args.bind}:{server.port}/dashboard/ following {', '.join(urls)}",
          flush=True)
    if aggregator.token:
        print(f"dashboard control token: {aggregator.token}", flush=True)
    # A plain flag polled with sleep: a handler that sets an Event can run
    # while this thread holds that Event's own lock inside wait(), and deadlock.
    done: list[int] = []
    old = {sig: signal.signal(sig, lambda signum, _frame: done.append(signum))
           for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        while not done:
            time.sleep(0.2)
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        aggregator.close()
        board.close()
        server.stop()
    return 0
