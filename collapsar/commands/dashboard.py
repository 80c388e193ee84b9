"""`collapsar dashboard`: the web page for one or several running managers.

Serves the built page (dashboard/web/dist) at /dashboard/ and, in the same
shape a manager does, the merged status of every `--manager` (collapsar
.dashboard.aggregate).  Without `--manager` it follows the local runs that
are active on this host (their run directories name their status ports).
Bound to 127.0.0.1 unless `--bind` says otherwise.  `collapsar run
--dashboard` serves the same page from the run itself.

Tokens never come from the command line: every user of the machine can read
a process's argv (/proc/PID/cmdline), but not its environment or a file
mode 0600.  The managers' tokens come from `--token-file` or
COLLAPSAR_MANAGER_TOKEN; the page's own token from COLLAPSAR_DASHBOARD_TOKEN
or, without it, a random one printed at start.
"""

from __future__ import annotations

import argparse
import os
import signal
import time
from collections.abc import Mapping
from pathlib import Path

from collapsar.errors import CollapsarError

MANAGER_TOKEN_VAR = "COLLAPSAR_MANAGER_TOKEN"
DASHBOARD_TOKEN_VAR = "COLLAPSAR_DASHBOARD_TOKEN"
MAX_TOKEN_FILE_BYTES = 4096
MIN_DASHBOARD_TOKEN_CHARS = 16  # the page's token guards every manager's controls
ARGV_TOKEN_REFUSED = (
    "--token puts the token in the command line, which every user of this machine can "
    "read (/proc/PID/cmdline); give it in a file (--token-file RUNDIR/control-token) "
    f"or in {MANAGER_TOKEN_VAR}"
)


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--manager",
        action="append",
        default=[],
        metavar="URL",
        help="Status URL of a manager (repeat for a multi-host run); default: the local runs active on this host",
    )
    parser.add_argument(
        "--bind",
        default="127.0.0.1",
        metavar="ADDRESS",
        help="Address to serve the page on (anything but loopback exposes it)",
    )
    parser.add_argument(
        "--port", type=int, default=8640, metavar="N", help="Port to serve the page on (0: any free port)"
    )
    parser.add_argument(
        "--token-file",
        action="append",
        default=[],
        metavar="PATH",
        help="File holding a manager's control token, such as its RUNDIR/control-token "
        "(one for all, or one per --manager in order); then the page needs the "
        f"dashboard's own token ({DASHBOARD_TOKEN_VAR}, or the one this command "
        "prints).  Without manager tokens, the page's token goes to the managers "
        "as it is",
    )
    # Refused with the fix: a token given here is readable by every user.
    parser.add_argument("--token", nargs="?", const="", default=None, help=argparse.SUPPRESS)
    parser.epilog = (
        f"Environment: {MANAGER_TOKEN_VAR} holds the managers' tokens instead of --token-file "
        f"(one token, or one per --manager separated by commas); {DASHBOARD_TOKEN_VAR} sets "
        f"the token the page must present (at least {MIN_DASHBOARD_TOKEN_CHARS} characters; "
        "only with manager tokens).  Tokens are never taken from the command line, where "
        "every user of the machine can read them."
    )


def checked_token(token: str, where: str) -> str:
    """One token, as it will go into an Authorization header."""
    if not token:
        raise CollapsarError(
            f"{where}: empty, expected a control token (collapsar run writes its own to RUNDIR/control-token)"
        )
    if not all(33 <= ord(char) < 127 for char in token):
        raise CollapsarError(f"{where}: expected one token of printable ASCII, without spaces or line breaks")
    return token


def read_token_file(path: str) -> str:
    where = f"--token-file {path}"
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_TOKEN_FILE_BYTES + 1)
    except OSError as error:
        raise CollapsarError(f"{where}: cannot read it: {error.strerror}") from None
    if len(raw) > MAX_TOKEN_FILE_BYTES:
        raise CollapsarError(f"{where}: over {MAX_TOKEN_FILE_BYTES} bytes, expected one control token")
    return checked_token(raw.decode("latin-1").strip(), where)


def manager_tokens(files: list[str], env: Mapping[str, str], managers: int) -> list[str] | None:
    """The managers' tokens (one for all, or one each), None when none is given."""
    from_env = env.get(MANAGER_TOKEN_VAR) or None
    if files and from_env:
        raise CollapsarError(f"--token-file and {MANAGER_TOKEN_VAR} both give the managers' tokens: use one of them")
    if files:
        tokens, given = [read_token_file(path) for path in files], f"--token-file given {len(files)} times"
    elif from_env:
        parts = from_env.split(",")
        tokens = [
            checked_token(part.strip(), f"{MANAGER_TOKEN_VAR} (token {index} of {len(parts)})")
            for index, part in enumerate(parts, 1)
        ]
        given = f"{MANAGER_TOKEN_VAR} holds {len(tokens)} tokens"
    else:
        return None
    if len(tokens) not in (1, managers):
        raise CollapsarError(f"{given} for {managers} managers: give one token for all, or one per --manager in order")
    return tokens


def dashboard_token(env: Mapping[str, str], tokens: list[str] | None) -> str | None:
    """The token the page must present when the dashboard holds the managers'."""
    from collapsar.manager.status.control import new_token

    own = env.get(DASHBOARD_TOKEN_VAR) or None
    if own is None:
        return new_token() if tokens else None
    if not tokens:
        raise CollapsarError(
            f"{DASHBOARD_TOKEN_VAR} needs the managers' tokens (--token-file or "
            f"{MANAGER_TOKEN_VAR}); without them the page's token goes to the managers"
        )
    own = checked_token(own.strip(), DASHBOARD_TOKEN_VAR)
    if len(own) < MIN_DASHBOARD_TOKEN_CHARS:
        raise CollapsarError(
            f"{DASHBOARD_TOKEN_VAR}: {len(own)} characters, expected at least "
            f"{MIN_DASHBOARD_TOKEN_CHARS} (it guards every manager's controls)"
        )
    return own


def local_managers() -> list[str]:
    """Status URLs of the runs active on this host, oldest first."""
    from collapsar.manager.local.rundir import is_stale, list_runs, read_journal, state_dir

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
    from collapsar.dashboard import assets_dir
    from collapsar.dashboard.aggregate import Aggregator, manager_url
    from collapsar.manager.status.api import StatusBoard, StatusServer

    if args.token is not None:
        raise CollapsarError(ARGV_TOKEN_REFUSED)
    if not 0 <= args.port <= 65535:
        raise CollapsarError(f"--port {args.port}: expected 0 to 65535")
    urls = [manager_url(text) for text in args.manager] or local_managers()
    if not urls:
        raise CollapsarError(
            "no --manager given and no local run is active on this host; pass "
            "--manager http://127.0.0.1:PORT (collapsar run prints its status URL)"
        )
    tokens = manager_tokens(args.token_file, os.environ, len(urls))
    own_token = dashboard_token(os.environ, tokens)
    assets = assets_dir()
    board = StatusBoard()
    aggregator = Aggregator(urls, board, tokens, own_token)
    try:
        server = StatusServer(
            board, args.port, bind=args.bind, control=aggregator, topology=aggregator.topology, assets=assets
        )
    except OSError as error:
        raise CollapsarError(
            f"cannot serve on {args.bind}:{args.port}: {error.strerror}; pick another --port (0: any free one)"
        ) from None
    aggregator.start()
    server.start()
    print(f"dashboard: http://{args.bind}:{server.port}/dashboard/ following {', '.join(urls)}", flush=True)
    if aggregator.token and os.environ.get(DASHBOARD_TOKEN_VAR):
        print(f"dashboard control token: the one in {DASHBOARD_TOKEN_VAR}", flush=True)
    elif aggregator.token:
        print(f"dashboard control token: {aggregator.token}", flush=True)
    # A plain flag polled with sleep: a handler that sets an Event can run
    # while this thread holds that Event's own lock inside wait(), and deadlock.
    done: list[int] = []
    old = {
        sig: signal.signal(sig, lambda signum, _frame: done.append(signum)) for sig in (signal.SIGINT, signal.SIGTERM)
    }
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
