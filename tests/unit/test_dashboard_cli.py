"""`collapsar dashboard`: bad input refused with one line before serving;
tokens taken from a file or the environment, never from argv; and, as a
real process, a control request carried through to a real manager, and the
Host check of `--bind localhost` (DNS rebinding)."""

import http.client
import json
import os
import subprocess
import sys
import threading
import time

import pytest

from collapsar.cli import main
from collapsar.manager.status.api import StatusBoard, StatusServer, binds_loopback
from collapsar.manager.status.control import RunControl

MANAGER_TOKEN = "manager-token-Xq81lZ0pA7"
DASHBOARD_TOKEN = "dashboard-token-R2c9vWm4Ke"


@pytest.fixture
def no_token_env(monkeypatch, tmp_path):
    for name in ("COLLAPSAR_MANAGER_TOKEN", "COLLAPSAR_DASHBOARD_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("COLLAPSAR_STATE_DIR", str(tmp_path))  # no local runs here


THREE = ["--manager", "http://a:1", "--manager", "http://b:2", "--manager", "http://c:3"]


@pytest.mark.parametrize(
    "argv, env, files, words",
    [
        (["--manager", "ftp://10.0.0.1:80"], {}, {}, "--manager ftp://10.0.0.1:80: expected a manager's status URL"),
        (["--manager", "http://127.0.0.1:1", "--port", "70000"], {}, {}, "--port 70000: expected 0 to 65535"),
        ([], {}, {}, "no --manager given and no local run is active on this host"),
        (
            ["--manager", "http://a:1", "--token", "s3cret-value"],
            {},
            {},
            "--token puts the token in the command line, which every user of this machine can read "
            "(/proc/PID/cmdline); give it in a file (--token-file RUNDIR/control-token) or in "
            "COLLAPSAR_MANAGER_TOKEN",
        ),
        (["--manager", "http://a:1", "--token=s3cret-value"], {}, {}, "--token puts the token in the command line"),
        (
            ["--manager", "http://a:1", "--token-file", "{tmp}/none"],
            {},
            {},
            "--token-file {tmp}/none: cannot read it: No such file or directory",
        ),
        (
            ["--manager", "http://a:1", "--token-file", "{tmp}/t"],
            {},
            {"t": "\n"},
            "--token-file {tmp}/t: empty, expected a control token (collapsar run writes its own to "
            "RUNDIR/control-token)",
        ),
        (
            ["--manager", "http://a:1", "--token-file", "{tmp}/t"],
            {},
            {"t": "one\ntwo\n"},
            "--token-file {tmp}/t: expected one token of printable ASCII, without spaces or line breaks",
        ),
        (
            ["--manager", "http://a:1", "--token-file", "{tmp}/t"],
            {},
            {"t": "x" * 5000},
            "--token-file {tmp}/t: over 4096 bytes, expected one control token",
        ),
        (
            [*THREE, "--token-file", "{tmp}/t", "--token-file", "{tmp}/t"],
            {},
            {"t": "x"},
            "--token-file given 2 times for 3 managers: give one token for all, or one per --manager in order",
        ),
        (
            THREE,
            {"COLLAPSAR_MANAGER_TOKEN": "x,y"},
            {},
            "COLLAPSAR_MANAGER_TOKEN holds 2 tokens for 3 managers: give one token for all",
        ),
        (THREE, {"COLLAPSAR_MANAGER_TOKEN": "x,,y"}, {}, "COLLAPSAR_MANAGER_TOKEN (token 2 of 3): empty"),
        (
            ["--manager", "http://a:1", "--token-file", "{tmp}/t"],
            {"COLLAPSAR_MANAGER_TOKEN": "x"},
            {"t": "x"},
            "--token-file and COLLAPSAR_MANAGER_TOKEN both give the managers' tokens: use one of them",
        ),
        (
            ["--manager", "http://a:1"],
            {"COLLAPSAR_DASHBOARD_TOKEN": DASHBOARD_TOKEN},
            {},
            "COLLAPSAR_DASHBOARD_TOKEN needs the managers' tokens (--token-file or COLLAPSAR_MANAGER_TOKEN)",
        ),
        (
            ["--manager", "http://a:1"],
            {"COLLAPSAR_MANAGER_TOKEN": "x", "COLLAPSAR_DASHBOARD_TOKEN": "short"},
            {},
            "COLLAPSAR_DASHBOARD_TOKEN: 5 characters, expected at least 16",
        ),
    ],
)
def test_bad_arguments(argv, env, files, words, capsys, monkeypatch, tmp_path, no_token_env):
    monkeypatch.setattr("collapsar.dashboard.assets_dir", lambda: tmp_path)  # page not needed
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    assert main(["dashboard", *(arg.replace("{tmp}", str(tmp_path)) for arg in argv)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words.replace("{tmp}", str(tmp_path)) in err
    assert "s3cret-value" not in err  # an error never repeats a token


def test_unbuilt_page_names_the_fix(monkeypatch, tmp_path, capsys, no_token_env):
    monkeypatch.setattr("collapsar.dashboard.WEB", tmp_path)
    assert main(["dashboard", "--manager", "http://127.0.0.1:1"]) == 3
    err = capsys.readouterr().err
    assert "dashboard page is not built" in err and "npm ci && npm run build" in err


def test_loopback_binds():
    assert binds_loopback("127.0.0.1") and binds_loopback("127.1.2.3") and binds_loopback("::1")
    assert binds_loopback("localhost")
    assert not binds_loopback("0.0.0.0") and not binds_loopback("") and not binds_loopback("10.1.2.3")


# ---- a real `collapsar dashboard` process against a real manager -----------------


class Manager:
    """A status server with the control API, as a run serves it; records actions."""

    def __init__(self):
        self.calls: list[str] = []
        self.board = StatusBoard()
        self.board.publish({"run_id": "r1", "t_us": 5, "state": "running", "instances": []})
        control = RunControl(MANAGER_TOKEN, stop=lambda: self.calls.append("stop") or {"ok": True})
        self.server = StatusServer(self.board, 0, control=control, topology=lambda: {"nodes": [], "links": []})
        self.server.start()
        self.url = f"http://127.0.0.1:{self.server.port}"


@pytest.fixture
def manager():
    made = Manager()
    yield made
    made.board.close()
    made.server.stop()


class Dashboard:
    """`collapsar dashboard ...` as a process; its first lines read."""

    def __init__(self, args: list[str], env: dict[str, str]):
        from collapsar.dashboard import assets_dir

        assets_dir()  # a clear error (with the fix) if the page was never built
        clean = {k: v for k, v in os.environ.items() if not k.startswith("COLLAPSAR_")}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "collapsar.cli", "dashboard", "--port", "0", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**clean, **env},
        )
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(self._first_lines()), daemon=True)
        reader.start()
        reader.join(30)
        assert lines and lines[0].startswith("dashboard: "), (lines, self.proc.poll())
        self.lines = lines
        self.port = int(lines[0].split()[1].rsplit(":", 1)[1].split("/")[0])

    def _first_lines(self) -> list[str]:
        first = [self.proc.stdout.readline().rstrip("\n")]
        if first[0].startswith("dashboard: "):
            first.append(self.proc.stdout.readline().rstrip("\n"))  # the token line, if any
        return first

    def request(self, method: str, path: str, token: str | None = None, host: str | None = None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        conn.putrequest(method, path, skip_host=True)
        conn.putheader("Host", host or f"127.0.0.1:{self.port}")
        body = b"{}" if method == "POST" else b""
        conn.putheader("Content-Length", str(len(body)))
        if token:
            conn.putheader("Authorization", f"Bearer {token}")
        conn.endheaders(body)
        reply = conn.getresponse()
        result = reply.status, json.loads(reply.read() or b"{}")
        conn.close()
        return result

    def stop(self) -> int:
        self.proc.terminate()
        return self.proc.wait(10)


def cmdline(pid: int) -> bytes:
    with open(f"/proc/{pid}/cmdline", "rb") as handle:
        return handle.read()


def test_tokens_from_a_file_stay_out_of_argv_and_control_works(manager, tmp_path):
    token_file = tmp_path / "control-token"
    token_file.write_text(MANAGER_TOKEN + "\n")  # as collapsar run writes RUNDIR/control-token
    token_file.chmod(0o600)
    dash = Dashboard(
        ["--manager", manager.url + "/status", "--token-file", str(token_file)],
        {"COLLAPSAR_DASHBOARD_TOKEN": DASHBOARD_TOKEN},
    )
    try:
        argv = cmdline(dash.proc.pid)
        assert str(token_file).encode() in argv  # the command line names the file...
        assert MANAGER_TOKEN.encode() not in argv and DASHBOARD_TOKEN.encode() not in argv  # ...not the tokens
        assert dash.lines[1] == "dashboard control token: the one in COLLAPSAR_DASHBOARD_TOKEN"
        assert dash.request("POST", "/control/stop")[0] == 401
        # The page needs the dashboard's token: a manager's is no key to the dashboard.
        assert dash.request("POST", "/control/stop", token=MANAGER_TOKEN)[0] == 401
        assert manager.calls == []
        code, reply = dash.request("POST", "/control/stop", token=DASHBOARD_TOKEN)
        assert (code, reply["ok"], manager.calls) == (200, True, ["stop"])
    finally:
        assert dash.stop() == 0


def test_manager_token_from_the_environment_and_a_printed_dashboard_token(manager):
    dash = Dashboard(["--manager", manager.url], {"COLLAPSAR_MANAGER_TOKEN": MANAGER_TOKEN})
    try:
        assert MANAGER_TOKEN.encode() not in cmdline(dash.proc.pid)
        printed = dash.lines[1].removeprefix("dashboard control token: ")
        assert len(printed) == 32 and printed != MANAGER_TOKEN
        assert dash.request("POST", "/control/stop", token=printed)[0] == 200
        assert manager.calls == ["stop"]
    finally:
        assert dash.stop() == 0


def test_bind_localhost_refuses_another_host_dns_rebinding(manager):
    """A page on attacker.example whose name now resolves to 127.0.0.1 sends
    its requests with Host: attacker.example."""
    dash = Dashboard(["--manager", manager.url, "--bind", "localhost"], {"COLLAPSAR_MANAGER_TOKEN": MANAGER_TOKEN})
    try:
        token = dash.lines[1].removeprefix("dashboard control token: ")
        evil = f"attacker.example:{dash.port}"
        assert dash.request("GET", "/status", host=evil) == (
            403,
            {"error": f"Host '{evil}' refused: this API answers loopback names only"},
        )
        assert dash.request("POST", "/control/stop", token=token, host=evil)[0] == 403
        assert manager.calls == []
        deadline = time.monotonic() + 10
        while "managers" not in (status := dash.request("GET", "/status", host=f"localhost:{dash.port}"))[1]:
            assert status[0] == 200 and time.monotonic() < deadline, status  # "starting" until the first merge
            time.sleep(0.05)
        assert status[1]["managers"][0]["url"] == manager.url
    finally:
        assert dash.stop() == 0
