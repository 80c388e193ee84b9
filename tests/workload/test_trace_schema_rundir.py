"""The run directory contract of wl-node and wl-client (COLLAPSAR_TRACE_DIR,
workload-node/README.md, "Tracing"): the files a run writes and their names
and modes (spans, request records, the client's summary), the instance names,
symlinks and existing files refused, --trace winning over the directory, and
the files flushed every second and at SIGTERM (and what a killed node leaves)."""

import json
import os
import signal
import subprocess
import time

import wl_otlp
from trace_schema_support import RUN_ID, finish, run_env, start_client, wait_for
from wl_support import LISTEN_RE, read_records, sanitizer_env


def test_run_directory_collects_spans_records_and_summary(binaries, start_node, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    node = start_node(env=run_env(tmp_path, "front", "front-1"))
    out_csv = tmp_path / "out.csv"
    code, out, err = finish(
        start_client(
            binaries,
            "--to",
            node.addr,
            "-C",
            "0",
            "-n",
            20,
            "--nt",
            2,
            "-r",
            500,
            "-o",
            out_csv,
            "--json",
            env=run_env(tmp_path, "shop", "client-1"),
        )
    )
    assert code == 0, err
    node.stop()
    assert sorted(p.name for p in run.iterdir()) == [
        "client-1.requests.csv",
        "client-1.spans.jsonl",
        "client-1.summary.json",
        "front-1.spans.jsonl",
    ]
    for path in run.iterdir():
        assert path.stat().st_mode & 0o777 == 0o644, path
    assert json.loads((run / "client-1.summary.json").read_text()) == {
        **json.loads(out),
        "instance": "client-1",
        "service": "shop",
        "run_id": RUN_ID,
    }
    rows = (run / "client-1.requests.csv").read_text().splitlines()
    assert rows[0] == "send_us,latency_us,status,thread,session"
    assert sorted(rows[1:]) == sorted(out_csv.read_text().splitlines()[1:])
    assert len(read_records(run / "client-1.requests.csv")) == 40
    assert len(wl_otlp.read_spans(run / "client-1.spans.jsonl")) == 40
    assert len(wl_otlp.read_spans(run / "front-1.spans.jsonl")) == 40 * 2  # serve + compute


def test_run_directory_refuses_names_symlinks_and_existing_files(binaries, start_node, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    for prog in (binaries["node"], binaries["client"]):
        for bad in ("a/b", ".hidden", ""):
            env = {**sanitizer_env(), **run_env(tmp_path, "x", bad)}
            proc = subprocess.run(
                [str(prog), "-b", "127.0.0.1:0"] if prog == binaries["node"] else [str(prog)],
                capture_output=True,
                text=True,
                env=env,
                timeout=30,
            )
            assert proc.returncode == 2, (prog, bad, proc.stderr)
            assert len(proc.stderr.splitlines()) == 1 and "COLLAPSAR_INSTANCE" in proc.stderr, proc.stderr
    victim = tmp_path / "victim"
    (run / "evil.spans.jsonl").symlink_to(victim)
    (run / "twice.spans.jsonl").write_text("earlier\n")
    for name in ("evil", "twice"):
        proc = subprocess.run(
            [str(binaries["node"]), "-b", "127.0.0.1:0"],
            capture_output=True,
            text=True,
            env={**sanitizer_env(), **run_env(tmp_path, "x", name)},
            timeout=30,
        )
        assert proc.returncode == 1 and f"{run}/{name}.spans.jsonl" in proc.stderr, proc.stderr
    assert not victim.exists() and (run / "twice.spans.jsonl").read_text() == "earlier\n"
    # --trace wins over the run directory: nothing is created there.
    node = start_node("--trace", tmp_path / "own.jsonl", env=run_env(tmp_path, "x", "own"))
    node.stop()
    assert not (run / "own.spans.jsonl").exists() and (tmp_path / "own.jsonl").exists()


def start_raw_node(binaries, tmp_path, env):
    """A node outside the fixture, to be killed: (process, port)."""
    log = tmp_path / "raw-node.log"
    with open(log, "w") as f:
        proc = subprocess.Popen(
            [str(binaries["node"]), "-b", "127.0.0.1:0", "-s", str(tmp_path / "raw.storage")],
            stdout=f,
            stderr=f,
            env={**sanitizer_env(), **env},
        )
    wait_for(lambda: LISTEN_RE.search(log.read_text()), "the node's port")
    return proc, int(LISTEN_RE.search(log.read_text())[3])


def test_run_directory_is_flushed_every_second_and_at_sigterm(binaries, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    node, port = start_raw_node(binaries, tmp_path, run_env(tmp_path, "front", "front-1"))
    try:
        client = start_client(
            binaries,
            "--to",
            f"127.0.0.1:{port}",
            "-C",
            "0",
            "-r",
            20,
            "-n",
            400,
            "--json",
            env=run_env(tmp_path, "shop", "client-1"),
        )
        csv = run / "client-1.requests.csv"
        # While both run: records and spans reach the files within about a second.
        wait_for(lambda: csv.exists() and len(csv.read_text().splitlines()) > 20, "records in the run directory")
        wait_for(lambda: len(wl_otlp.read_spans(run / "client-1.spans.jsonl")) > 20, "the client's spans")
        client.send_signal(signal.SIGTERM)
        code, out, err = finish(client, timeout=30)
        assert code == 0, err
        summary = json.loads((run / "client-1.summary.json").read_text())
        assert summary == {**json.loads(out), "instance": "client-1", "service": "shop", "run_id": RUN_ID}
        assert 20 < summary["requests"] < 400
        assert len(read_records(csv)) == summary["requests"]
        assert len(wl_otlp.read_spans(run / "client-1.spans.jsonl")) == summary["requests"]
        # A node that dies without a word has written what it served up to a second before.
        time.sleep(1.5)
        node.send_signal(signal.SIGKILL)
        node.wait(timeout=30)
        serves = [s for _, _, s in wl_otlp.read_spans(run / "front-1.spans.jsonl") if s["name"] == "serve"]
        assert len(serves) == summary["requests"]
    finally:
        if node.poll() is None:
            node.kill()
            node.wait()
        if os.path.exists(tmp_path / "raw.storage"):
            os.unlink(tmp_path / "raw.storage")
