"""`collapsar trace` as a user meets it: the default table, and one clear
line with exit 2 for every kind of bad run directory."""

import json

import pytest
from span_files import RunFiles, chain

from collapsar.cli import main

EXPERIMENT = """\
experiment: {name: trace-cli}
services:
  client: {command: [sleep, "1"]}
  front: {command: [sleep, "1"]}
  db: {command: [sleep, "1"]}
links:
  - {from: client, to: front, latency: 10ms}
  - {from: front, to: db, latency: 5ms}
"""


def one_error(argv, capsys) -> str:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.fixture
def run_dir(tmp_path):
    files = RunFiles(tmp_path / "run")
    for i in range(3):
        chain(files, i * 100.0 + 1, rtt1_ms=20.5 + i)
    return files.close(EXPERIMENT)


def test_the_table(run_dir, capsys):
    assert main(["trace", str(run_dir)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["CLIENT", "REQUESTS", "OK", "ERROR", "TIMEOUT", "P50", "P90", "P99", "P99.9", "MAX"]
    assert out[1].split() == [
        "client",
        "3",
        "3",
        "0",
        "0",
        "34.900",
        "ms",
        "35.900",
        "ms",
        "35.900",
        "ms",
        "35.900",
        "ms",
        "35.900",
        "ms",
    ]
    assert out[3] == "client, whole run: 3 requests (3 ok), p50 34.900 ms, p99 35.900 ms"
    assert out[5].split() == ["network", "client", "->", "front", "21.500", "ms", "20.000", "ms", "21.500", "ms", "3"]
    assert out[-1].startswith("21 spans, 3 requests; percentiles nearest-rank over ok requests")


def test_a_missing_run_directory(tmp_path, capsys):
    line = one_error(["trace", str(tmp_path / "nope")], capsys)
    assert line == (
        f"collapsar: {tmp_path / 'nope'}: does not exist; expected a run directory (collapsar run prints it)"
    )


def test_a_file_instead_of_a_directory(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    assert "is not a directory" in one_error(["trace", str(tmp_path / "file")], capsys)


def test_a_run_without_spans(tmp_path, capsys):
    (tmp_path / "workload").mkdir()
    assert one_error(["trace", str(tmp_path)], capsys) == (
        f"collapsar: {tmp_path}: no spans (workload/*.spans.jsonl or *.spans.jsonl); expected the run directory "
        f"of a run whose wl-node and wl-client instances traced, or their trace directory"
    )


def test_a_trace_directory_of_span_files_alone(run_dir, capsys):
    # What Compose leaves beside its file (EXPERIMENT.workload): span files
    # without experiment.yaml or t0; the latencies, no configured RTTs.
    gathered = run_dir.parent / "gathered"
    gathered.mkdir()
    for path in (run_dir / "workload").glob("*.spans.jsonl"):
        (gathered / path.name).write_bytes(path.read_bytes())
    assert main(["trace", str(gathered)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].split()[:5] == ["client", "3", "3", "0", "0"]
    assert f"note: no {gathered / 'experiment.yaml'}: configured RTTs are not shown" in out


def test_a_line_that_is_not_json(run_dir, capsys):
    path = run_dir / "workload" / "front.spans.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text(lines[0] + "{not json\n" + "".join(lines[1:]))
    line = one_error(["trace", str(run_dir)], capsys)
    assert line.startswith(f"{path}:2: not JSON (") and line.endswith(
        "expected one OTLP/JSON ExportTraceServiceRequest per line"
    )


@pytest.mark.parametrize(
    "bad, what",
    [
        ({"spans": []}, "missing 'resourceSpans'"),
        (
            {"resourceSpans": [{"scopeSpans": [{"spans": [{"name": "serve", "traceId": "ab", "spanId": "cd"}]}]}]},
            "missing 'startTimeUnixNano'",
        ),
        (
            {
                "resourceSpans": [
                    {
                        "scopeSpans": [
                            {
                                "spans": [
                                    {
                                        "name": "serve",
                                        "traceId": "ab",
                                        "spanId": "cd",
                                        "startTimeUnixNano": "soon",
                                        "endTimeUnixNano": "1",
                                    }
                                ]
                            }
                        ]
                    }
                ]
            },
            "invalid literal for int() with base 10: 'soon'",
        ),
    ],
)
def test_a_line_that_is_not_the_span_format(run_dir, capsys, bad, what):
    path = run_dir / "workload" / "db.spans.jsonl"
    with path.open("a") as handle:
        handle.write(json.dumps(bad) + "\n")
    line = one_error(["trace", str(run_dir)], capsys)
    assert line.startswith(f"{path}:")
    assert f": {what}; expected an OTLP/JSON ExportTraceServiceRequest of the workload tools' spans" in line


def test_a_last_line_cut_short_is_skipped_with_a_note(run_dir, capsys):
    path = run_dir / "workload" / "db.spans.jsonl"
    with path.open("a") as handle:
        handle.write('{"resourceSpans": [{"scopeSpa')
    assert main(["trace", str(run_dir)]) == 0
    assert "note: 1 span file(s) end in a line cut short (a writer was killed): skipped" in capsys.readouterr().out


def test_spans_without_a_client(tmp_path, capsys):
    files = RunFiles(tmp_path)
    chain(files, 1.0)
    files.close()
    (tmp_path / "workload" / "client.spans.jsonl").unlink()
    assert one_error(["trace", str(tmp_path)], capsys) == (
        f"collapsar: {tmp_path}: 6 spans but no client 'request' span; expected the spans of a run with "
        f"wl-client instances"
    )


def test_a_bad_t0_and_a_bad_experiment(run_dir, capsys):
    (run_dir / "t0").write_text("yesterday\n")
    assert one_error(["trace", str(run_dir)], capsys) == (
        f"collapsar: {run_dir / 't0'}: expected the unix time of t=0 in seconds, like 1700000000.123456"
    )
    (run_dir / "t0").write_text("1700000000.5\n")
    (run_dir / "experiment.yaml").write_text(EXPERIMENT.replace("10ms", "ten"))
    assert one_error(["trace", str(run_dir)], capsys) == (
        f"{run_dir / 'experiment.yaml'}:7: link client -> front: latency: expected a duration like 10ms, 250us "
        f"or 1.5s, got 'ten'"
    )
