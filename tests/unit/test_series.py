"""The run's time series (measure/series.py): the rows and files it writes."""

import csv
import os

import pytest

from collapsar.manager.measure.series import SeriesWriter

SHARING = {"flows": [{"src": "a", "dst": "b", "congestion_loss_ratio": 0.02}]}
LINKS = [  # the live view's (status/topoview.py): per link, each direction's rate and load
    {
        "id": 3,
        "a": "a",
        "b": "s",
        "up": {"rate_bps": 20_000_000, "load_bps": 25_000_000, "utilisation": 1.25},
        "down": {"rate_bps": None, "load_bps": 0, "utilisation": None},  # no load: no row
    },
    {"id": 4, "a": "s", "b": "b", "up": {"rate_bps": None, "load_bps": 9_000, "utilisation": None}},
]


def _rows(path):
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.fixture
def run_dir(tmp_path):
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    yield tmp_path, fd
    os.close(fd)


def test_one_row_per_sending_pair_and_link_each_second(run_dir):
    path, fd = run_dir
    series = SeriesWriter(fd)
    assert not series.due(999_999) and series.due(1_000_000)
    rates = {("a", "b"): 12_000_000, ("b", "a"): 0, ("a", "c"): 3_000}  # b -> a sent nothing: no row
    series.second(
        1_020_000,
        rates,
        configured=lambda src, dst: (20_000_000, False) if dst == "b" else (None, True),
        allowed=lambda src, dst: 10_000_000,
        sharing=SHARING,
        links=LINKS,
    )
    assert series.next_us == 2_000_000 and not series.due(1_999_999)
    series.second(2_050_000, {("a", "b"): 9_000_000}, lambda s, d: (20_000_000, False), lambda s, d: None, None)
    series.events(
        [
            {
                "index": 0,
                "label": "link a -- s set",
                "scheduled_us": 1_500_000,
                "applied_us": 1_500_120,
                "lateness_us": 120,
                "error": None,
            }
        ]
    )
    series.close()
    assert _rows(path / "series" / "flows.csv") == [
        {
            "t_s": "1.02",
            "src": "a",
            "dst": "b",
            "measured_bps": "12000000",
            "configured_bps": "20000000",
            "share_bps": "10000000",
            "congestion_loss": "0.02",
            "cut": "0",
        },
        {  # a cut path: no rate in force, no share
            "t_s": "1.02",
            "src": "a",
            "dst": "c",
            "measured_bps": "3000",
            "configured_bps": "",
            "share_bps": "",
            "congestion_loss": "0",
            "cut": "1",
        },
        {  # sharing off: no loss charged; an unlimited class: no share
            "t_s": "2.05",
            "src": "a",
            "dst": "b",
            "measured_bps": "9000000",
            "configured_bps": "20000000",
            "share_bps": "",
            "congestion_loss": "0",
            "cut": "0",
        },
    ]
    assert _rows(path / "series" / "links.csv") == [
        {
            "t_s": "1.02",
            "link": "3",
            "a": "a",
            "b": "s",
            "direction": "up",
            "capacity_bps": "20000000",
            "load_bps": "25000000",
            "utilisation": "1.25",
        },
        {  # an unlimited link: no capacity, no utilisation
            "t_s": "1.02",
            "link": "4",
            "a": "s",
            "b": "b",
            "direction": "up",
            "capacity_bps": "",
            "load_bps": "9000",
            "utilisation": "",
        },
    ]
    assert _rows(path / "series" / "events.csv") == [
        {
            "index": "0",
            "scheduled_s": "1.5",
            "applied_s": "1.50012",
            "lateness_us": "120",
            "label": "link a -- s set",
            "error": "",
            "adhoc": "0",
        }
    ]
    assert oct(os.stat(path / "series" / "flows.csv").st_mode & 0o777) == "0o600"


def test_the_series_never_writes_through_what_is_already_there(run_dir):
    path, fd = run_dir
    os.symlink("/etc", path / "series")  # only root could have put it in a run directory; still refused
    with pytest.raises(FileExistsError):
        SeriesWriter(fd)
    assert os.path.islink(path / "series")


def test_workload_per_client_and_second_from_its_requests(run_dir):
    path, fd = run_dir
    series = SeriesWriter(fd)
    records = [  # send_us counts from the client's start, which was at t = 2.5 s
        {"send_us": "100000", "latency_us": "10000", "status": "OK"},  # t 2.6 s
        {"send_us": "200000", "latency_us": "30000", "status": "OK"},
        {"send_us": "300000", "latency_us": "20000", "status": "OK"},
        {"send_us": "400000", "latency_us": "500000", "status": "TIMEOUT"},
        {"send_us": "600000", "latency_us": "40000", "status": "OK"},  # t 3.1 s: the next second
        {"send_us": "700000", "latency_us": "1000", "status": "ERR"},
        {"send_us": "oops", "latency_us": "1", "status": "OK"},  # not a number: skipped
        {"send_us": "800000", "latency_us": "1", "status": "LOST"},  # not a status wl-client writes
    ]
    series.workload({"client": (2_500_000, records), "idle": (0, [])})
    series.close()
    assert _rows(path / "series" / "workload.csv") == [
        {
            "t_s": "3",
            "client": "client",
            "sent": "4",
            "ok": "3",
            "err": "0",
            "timeout": "1",
            "p50_ms": "20",
            "p99_ms": "30",
        },
        {
            "t_s": "4",
            "client": "client",
            "sent": "2",
            "ok": "1",
            "err": "1",
            "timeout": "0",
            "p50_ms": "40",
            "p99_ms": "40",
        },
    ]


def test_requests_are_read_only_from_a_regular_file_of_bounded_size(tmp_path, monkeypatch):
    from collapsar.manager.measure import workload

    good = tmp_path / "c.requests.csv"
    good.write_text("send_us,latency_us,status\n1,2,OK\n")
    assert workload.read_requests(good) == [{"send_us": "1", "latency_us": "2", "status": "OK"}]
    os.symlink(good, tmp_path / "link.requests.csv")
    assert workload.read_requests(tmp_path / "link.requests.csv") is None  # never followed
    os.mkfifo(tmp_path / "fifo.requests.csv")
    assert workload.read_requests(tmp_path / "fifo.requests.csv") is None  # never waited on
    assert workload.read_requests(tmp_path / "missing.requests.csv") is None
    monkeypatch.setattr(workload, "MAX_REQUESTS_BYTES", 10)
    assert workload.read_requests(good) is None  # larger than the bound


def test_live_probe_rows_count_each_whole_second_of_every_pair():
    from collapsar.manager.measure.liveprobe import LiveProbe

    probe = LiveProbe([("a", "b"), ("b", "a")], {}, {}, interval_s=0.25)
    probe.t0_unix_s = 1000.0
    for line in (
        "PING 10.0.0.3 (10.0.0.3) 56(84) bytes of data.",  # not an echo: ignored
        "[1000.100000] 64 bytes from 10.0.0.3: icmp_seq=1 ttl=64 time=20.5 ms",
        "[1000.350000] 64 bytes from 10.0.0.3: icmp_seq=2 ttl=64 time=30.5 ms",
        "[1000.600000] 64 bytes from 10.0.0.3: icmp_seq=3 ttl=64 time=25.0 ms",
        "[1001.100000] 64 bytes from 10.0.0.3: icmp_seq=5 ttl=64 time=40.0 ms",
    ):
        probe.take(("a", "b"), line)
    probe.stop(now_unix_s=1002.7)  # no pings started: only the end of the last whole second
    rtt = lambda second, src, dst: 50.0 if second == 1 else None  # noqa: E731
    assert probe.rows(rtt) == [
        (1, "a", "b", 4, 3, 20.5, 25.0, 30.5, 50.0),
        (1, "b", "a", 4, 0, None, None, None, 50.0),
        (2, "a", "b", 4, 1, 40.0, 40.0, 40.0, None),
        (2, "b", "a", 4, 0, None, None, None, None),
    ]


def test_live_probe_counts_an_echo_in_the_second_it_was_sent_and_a_cut_as_lost():
    from collapsar.manager.measure.liveprobe import LiveProbe

    probe = LiveProbe([("a", "b")], {}, {}, interval_s=0.5)
    probe.t0_unix_s = 1000.0
    for line in (
        "[1000.060000] 64 bytes from 10.0.0.3: icmp_seq=1 ttl=64 time=50.0 ms",  # sent at 0.01
        "[1001.080000] 64 bytes from 10.0.0.3: icmp_seq=2 ttl=64 time=570.0 ms",  # sent at 0.51, back in second 2
        "[1001.060000] 64 bytes from 10.0.0.3: icmp_seq=3 ttl=64 time=50.0 ms",  # sent at 1.01
        # seq 4 lost; then the path was cut and ping numbered nothing for 2 s
        "[1004.060000] 64 bytes from 10.0.0.3: icmp_seq=5 ttl=64 time=50.0 ms",  # sent at 4.01
    ):
        probe.take(("a", "b"), line)
    probe.stop(now_unix_s=1005.2)
    rows = [row[:5] for row in probe.rows(lambda second, src, dst: None)]
    assert rows == [
        (1, "a", "b", 2, 2),  # the late echo of second 1 is no loss
        (2, "a", "b", 2, 1),
        (3, "a", "b", 2, 0),  # the cut: sent, none answered
        (4, "a", "b", 2, 0),
        (5, "a", "b", 2, 1),
    ]


def test_live_probe_latest_counts_requests_and_replies():
    from collapsar.manager.measure.liveprobe import LiveProbe

    probe = LiveProbe([("a", "b")], {}, {}, interval_s=0.5)
    probe.t0_unix_s = 1000.0
    for line in (
        "[1000.060000] 64 bytes from 10.0.0.3: icmp_seq=1 ttl=64 time=50.0 ms",
        "[1001.060000] 64 bytes from 10.0.0.3: icmp_seq=3 ttl=64 time=40.0 ms",  # seq 2 lost
    ):
        probe.take(("a", "b"), line)
    assert probe.latest() == [{"src": "a", "dst": "b", "rtt_ms": 40.0, "requests": 3, "replies": 2}]


def test_workload_tail_reads_what_clients_append_and_never_a_planted_file(tmp_path):
    from collapsar.manager.measure.livework import LATENCY_BUCKETS_S, WorkloadTail

    (tmp_path / "wc.requests.csv").write_text("send_us,latency_us,status,thread,session\n1,800,OK,0,0\n2,1500,OK,0")
    (tmp_path / "secret").write_text("1,5,OK,0,0\n")
    (tmp_path / "evil.requests.csv").symlink_to(tmp_path / "secret")
    os.mkfifo(tmp_path / "fifo.requests.csv")
    tail = WorkloadTail(os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY), ["wc", "evil", "fifo"])
    tail.poll()
    (wc,) = tail.figures()
    assert wc["requests"] == {"ok": 1, "err": 0, "timeout": 0}  # the second line is not whole yet
    with open(tmp_path / "wc.requests.csv", "a") as handle:
        handle.write(",0\n3,30000,ERR,0,0\n4,2000000,OK,0,0\n5,250000,TIMEOUT,0,0\n")
    tail.poll()
    (wc,) = tail.figures()
    assert wc["requests"] == {"ok": 3, "err": 1, "timeout": 1}
    assert wc["latency_count"] == 3 and wc["latency_sum_s"] == 2.0023
    at = dict(zip(LATENCY_BUCKETS_S, wc["latency_cumulative"]))
    assert (at[0.0005], at[0.001], at[0.002], at[1.0], at[2.0]) == (0, 1, 2, 2, 3)
    assert tail.refused == {"evil": "a symlink", "fifo": "not a regular file"}
    tail.close()


def test_live_probe_pairs_are_capped_to_a_whole_corner_of_the_topology():
    from collapsar.manager.measure.liveprobe import MAX_PAIRS, capped

    names = [f"s{i}" for i in range(50)]
    every = [(a, b) for a in names for b in names if a != b]
    kept = capped(every)
    assert MAX_PAIRS == 256 and len(kept) == 16 * 15  # the first 16: 16 * 15 = 240 <= 256 < 17 * 16
    assert set(kept) == {(a, b) for a in names[:16] for b in names[:16] if a != b}
    assert capped(every[:100]) == every[:100]
