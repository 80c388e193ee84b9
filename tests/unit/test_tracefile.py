"""Link trace files (collapsar.linktraces): both formats parsed, resampled
onto steps with exact values, read safely, and every bad row reported as
FILE:LINE with its message."""

from __future__ import annotations

import os

import pytest

from collapsar.errors import TopologyError
from collapsar.linktraces.base import MAX_CSV_ROWS, MAX_PROBLEMS, MAX_TRACE_BYTES
from collapsar.linktraces.files import parse_trace, read_trace_file

S = 1_000_000
MS = 1000


def csv_steps(text: str, step_us: int, count: int):
    trace = parse_trace("t.csv", text.encode())
    steps, empty = trace.steps(step_us, count)
    assert empty == 0
    return [(step.values, step.line) for step in steps]


def problems(name: str, text: str | bytes) -> list[str]:
    with pytest.raises(TopologyError) as error:
        parse_trace(name, text.encode() if isinstance(text, str) else text)
    return error.value.lines()


# ---- CSV --------------------------------------------------------------------


def test_csv_with_units_in_cells_gives_one_step_per_row():
    text = "time,bandwidth,latency,loss\n0s,8Mbps,20ms,1%\n1s,2Mbps,30ms,0.5%\n2s,5Mbps,10ms,0\n"
    trace = parse_trace("t.csv", text.encode())
    assert (trace.format, trace.fields, trace.play_steps(S)) == ("csv", ("rate_bps", "delay_us", "loss_ratio"), 3)
    assert csv_steps(text, S, 3) == [
        ({"rate_bps": 8_000_000, "delay_us": 20_000, "loss_ratio": 0.01}, 2),
        ({"rate_bps": 2_000_000, "delay_us": 30_000, "loss_ratio": 0.005}, 3),
        ({"rate_bps": 5_000_000, "delay_us": 10_000, "loss_ratio": 0.0}, 4),
    ]


def test_csv_with_units_in_the_header_and_comments():
    text = "# measured on a train\ntime_ms, bandwidth_mbps, loss_percent\n\n0,8,1\n# a tunnel\n500,2.5,2\n"
    assert csv_steps(text, 500 * MS, 2) == [
        ({"rate_bps": 8_000_000, "loss_ratio": 0.01}, 4),
        ({"rate_bps": 2_500_000, "loss_ratio": 0.02}, 6),
    ]
    ratio = "time_s,loss_ratio,latency_us\n0,0.25,1500\n"
    assert csv_steps(ratio, S, 1) == [({"loss_ratio": 0.25, "delay_us": 1500}, 2)]


def test_an_empty_cell_keeps_the_row_before():
    text = "time,bandwidth,latency\n0s,8Mbps,20ms\n1s,,40ms\n2s,1Mbps,\n"
    assert [values for values, _ in csv_steps(text, S, 3)] == [
        {"rate_bps": 8_000_000, "delay_us": 20_000},
        {"rate_bps": 8_000_000, "delay_us": 40_000},
        {"rate_bps": 1_000_000, "delay_us": 40_000},
    ]


def test_csv_rows_are_averaged_over_each_step_weighted_by_time():
    # 10 for 250 ms then 20 for 750 ms; 20 for 500 ms then 4 (the last row, to the step's end).
    text = "time_ms,bandwidth_mbps,latency_ms,loss_percent\n0,10,10,0\n250,20,30,4\n1500,4,50,1\n"
    assert csv_steps(text, S, 2) == [
        ({"rate_bps": 17_500_000, "delay_us": 25_000, "loss_ratio": pytest.approx(0.03)}, 2),
        ({"rate_bps": 12_000_000, "delay_us": 40_000, "loss_ratio": pytest.approx(0.025)}, 3),
    ]


def test_a_csv_trace_lasts_to_the_end_of_its_last_rows_step_and_repeats():
    text = "time,bandwidth\n0s,8Mbps\n1s,2Mbps\n2.5s,5Mbps\n"
    trace = parse_trace("t.csv", text.encode())
    assert trace.play_steps(S) == 3  # 0-1 s, 1-2 s, 2-3 s (2.5 s holds until 3 s)
    rates = [step.values["rate_bps"] for step in trace.steps(S, 7)[0]]
    assert rates == [8_000_000, 2_000_000, 3_500_000, 8_000_000, 2_000_000, 3_500_000, 8_000_000]


CSV_ERRORS = [
    ("", ["t.csv:1: empty; expected a CSV header like time,bandwidth or a number"]),
    ("bandwidth,time\n", ["t.csv:1: column 'bandwidth': expected time (a unit may follow, as in time_s)"]),
    (
        "time,rate\n",
        ["t.csv:1: column 'rate': expected bandwidth or latency or loss (a unit may follow, as in time_s)"],
    ),
    ("time,loss,loss\n", ["t.csv:1: column 'loss' is written twice"]),
    ("time_parsecs,loss\n", ["t.csv:1: column 'time_parsecs': unknown unit 'parsecs' for time"]),
    ("time,latency_percent\n", ["t.csv:1: column 'latency_percent': unknown unit 'percent' for latency"]),
    ("time,loss_%\n", ["t.csv:1: column 'loss_%': unknown unit '%' for loss"]),
    ("time\n0s\n", ["t.csv:1: expected time and at least one of bandwidth, latency, loss"]),
    ("time,loss\n", ["t.csv:1: no rows after the header"]),
    ("time,loss\n0s,1%,2\n", ["t.csv:2: expected 2 cells (time, loss), got 3"]),
    ("time,loss\n0s,\n", ["t.csv:2: loss: empty in the first row, which must give every column"]),
    ("time,loss\n0s,1%\n,2%\n", ["t.csv:3: time: empty; every row needs its time"]),
    (
        "time,latency\n0s,10\n",
        ["t.csv:2: latency: expected a duration like 10ms, 250us or 1.5s (a unit is required), got '10'"],
    ),
    (
        "time_s,latency_ms\n0,10ms\n",
        ["t.csv:2: latency: expected a plain number (the header gives the unit), got '10ms'"],
    ),
    ("time,bandwidth\n0s,0Mbps\n", ["t.csv:2: bandwidth: expected a rate above zero, got '0Mbps'"]),
    ("time,loss\n0s,120%\n", ["t.csv:2: loss: expected a loss like 0.1% or 0.001 between 0 and 100%, got '120%'"]),
    ("time,loss\n1s,1%\n", ["t.csv:2: the first row must be at time 0, got 1000000us"]),
    ("time,loss\n0s,1%\n2s,1%\n2s,2%\n", ["t.csv:4: time 2000000us does not come after the row before (2000000us)"]),
    ("time,loss\n0s,1%\n25h,1%\n", ["t.csv:3: time 90000000000us is past a day, the longest a trace may run"]),
]


@pytest.mark.parametrize("text,expected", CSV_ERRORS, ids=[e[1][0][6:50] for e in CSV_ERRORS])
def test_csv_errors(text, expected):
    assert problems("t.csv", text) == expected


def test_every_bad_row_is_reported_up_to_a_bound():
    text = "time,loss\n0s,1%\n" + "".join(f"{k}s,x\n" for k in range(1, 30))
    lines = problems("t.csv", text)
    assert len(lines) == MAX_PROBLEMS + 1
    assert lines[0] == "t.csv:3: loss: expected a loss like 0.1% or 0.001, got 'x'"
    assert lines[-1] == f"t.csv:{3 + MAX_PROBLEMS}: more than {MAX_PROBLEMS} bad rows; stopped here"


def test_too_many_csv_rows():
    text = "time_ms,loss\n" + "".join(f"{k},0\n" for k in range(MAX_CSV_ROWS + 1))
    assert problems("t.csv", text) == [f"t.csv:{MAX_CSV_ROWS + 2}: more than {MAX_CSV_ROWS} rows; use a coarser trace"]


def test_not_utf8():
    assert problems("t.csv", b"time,loss\n0s,\xff\n") == ["t.csv:2: not UTF-8 text; a trace is CSV or Mahimahi text"]


# ---- Mahimahi ---------------------------------------------------------------


def mahimahi(every_ms_per_second: tuple[int, ...]) -> bytes:
    """A delivery trace with one opportunity every N ms in each second."""
    lines = []
    for second, every in enumerate(every_ms_per_second):
        lines += [str(t) for t in range(second * 1000 + every, second * 1000 + 1001, every)]
    return ("\n".join(lines) + "\n").encode()


def test_mahimahi_one_line_is_one_packet_a_millisecond():
    trace = parse_trace("m", b"1\n")
    assert (trace.format, trace.fields, trace.play_steps(100 * MS)) == ("mahimahi", ("rate_bps",), 1)
    steps, empty = trace.steps(100 * MS, 3)
    assert [step.values for step in steps] == [{"rate_bps": 12_000_000}] * 3 and empty == 0


def test_mahimahi_counts_opportunities_per_step_and_repeats():
    trace = parse_trace("m", mahimahi((1, 2, 4, 2)))
    assert trace.play_steps(S) == 4
    steps, _ = trace.steps(S, 6)
    assert [step.values["rate_bps"] for step in steps] == [12_000_000, 6_000_000, 3_000_000, 6_000_000] + [
        12_000_000,
        6_000_000,
    ]
    assert [step.line for step in steps] == [1, 1001, 1501, 1751, 1, 1001]  # the first opportunity of the step
    half, _ = trace.steps(500 * MS, 3)
    assert [step.values["rate_bps"] for step in half] == [12_000_000, 12_000_000, 6_000_000]


def test_mahimahi_several_packets_in_one_millisecond_and_a_period_that_is_not_whole_steps():
    # 3 packets at 0 ms, 1 at 250 ms, the file lasting 1500 ms.
    trace = parse_trace("m", b"0\n0\n0\n250\n1500\n")
    assert trace.play_steps(S) == 2
    steps, _ = trace.steps(500 * MS, 4)
    # [0, 500]: 0,0,0,250; (500, 1000]: none, so one packet; (1000, 1500]: 1500 and the
    # repeat's 0,0,0 (also at 1500); (1500, 2000]: the repeat's 250, at 1750.
    assert [step.values["rate_bps"] for step in steps] == [96_000, 24_000, 96_000, 24_000]


def test_mahimahi_steps_without_an_opportunity_run_at_one_packet():
    steps, empty = parse_trace("m", b"3000\n").steps(S, 3)
    assert [step.values["rate_bps"] for step in steps] == [12_000] * 3 and empty == 2


MAHIMAHI_ERRORS = [
    (b"5\n3\n", ["m:2: 3ms comes before the line before (5ms)"]),
    (b"5\nx\n6\n", ["m:2: expected a whole number of milliseconds, got 'x'"]),
    (b"5\n-6\n", ["m:2: expected a whole number of milliseconds, got '-6'"]),
    (b"0\n0\n", ["m:2: the last time must be above 0ms: it is how long the trace lasts"]),
    (b"86400001\n", ["m:1: 86400001ms is past a day, the longest a trace may run"]),
    (b"1" * 20 + b"\n", ["m:1: expected a whole number of milliseconds, got '11111111111111111111'"]),
]


@pytest.mark.parametrize("data,expected", MAHIMAHI_ERRORS, ids=[e[1][0] for e in MAHIMAHI_ERRORS])
def test_mahimahi_errors(data, expected):
    assert problems("m", data) == expected


# ---- reading the file -------------------------------------------------------


def test_read_below_the_folder(tmp_path):
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "a.csv").write_text("time,loss\n0s,1%\n")
    assert read_trace_file(str(tmp_path), "traces/a.csv") == b"time,loss\n0s,1%\n"


@pytest.mark.parametrize("path", ["/etc/passwd", "../x.csv", "traces/../a.csv", "traces//a.csv"])
def test_paths_outside_the_folder_are_refused(tmp_path, path):
    with pytest.raises(
        ValueError, match=r"^expected a path below the experiment file's folder \(relative, without \.\.\)$"
    ):
        read_trace_file(str(tmp_path), path)


def test_symlinks_are_never_followed(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "a.csv").write_text("time,loss\n0s,1%\n")
    os.symlink("real/a.csv", tmp_path / "file-link.csv")
    os.symlink("real", tmp_path / "dir-link")
    message = "^a symlink on its path; trace files are never read through one$"
    with pytest.raises(ValueError, match=message):
        read_trace_file(str(tmp_path), "file-link.csv")
    with pytest.raises(ValueError, match=message):
        read_trace_file(str(tmp_path), "dir-link/a.csv")


def test_missing_fifo_and_huge_files(tmp_path):
    with pytest.raises(ValueError, match="^cannot read it: No such file or directory$"):
        read_trace_file(str(tmp_path), "none.csv")
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(ValueError, match="^cannot read it: not a regular file$"):
        read_trace_file(str(tmp_path), "fifo")
    with open(tmp_path / "huge.csv", "wb") as handle:
        handle.truncate(MAX_TRACE_BYTES + 1)
    with pytest.raises(ValueError, match="^larger than 32 MiB$"):
        read_trace_file(str(tmp_path), "huge.csv")
