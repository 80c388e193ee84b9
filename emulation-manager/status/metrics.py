"""`GET /metrics`: a run's figures in Prometheus's text exposition format,
from one status snapshot (run/snapshot.py), so that a user's Prometheus and
Grafana follow a run live.  Names follow Prometheus's conventions: a
`collapsar_` prefix, base units in the name (bits per second for rates,
seconds for times, `_ratio` for fractions), `_total` for counters.

  collapsar_run_info{run_id,source,mode,state}             1
  collapsar_experiment_time_seconds                        since t=0
  collapsar_instance_up{instance,status}                   1 if its command runs
  collapsar_sent_bytes_total{src,dst}                      eBPF counters, per pair
  collapsar_flow_rate_bits_per_second{src,dst}             measured, last 1 s window
  collapsar_flow_configured_bits_per_second{src,dst}       the path's rate (absent: unlimited)
  collapsar_flow_cut{src,dst}                              1 if the path is cut
  collapsar_flow_share_bits_per_second{src,dst}            what the sharing loop allows it
  collapsar_flow_congestion_loss_ratio{src,dst}            loss charged for an oversubscribed link
  collapsar_link_load_bits_per_second{link,a,b,direction}  the busiest instance-level link's load
  collapsar_link_capacity_bits_per_second{...}             its rate now (absent: unlimited)
  collapsar_link_utilisation_ratio{...}                    load / capacity
  collapsar_events_applied, collapsar_events_pending       timeline steps
  collapsar_event_lateness_seconds                         histogram of the applied steps' lateness
  collapsar_probe_rtt_seconds{src,dst}                     --probe-every: the pair's last echo's RTT
  collapsar_probe_configured_rtt_seconds{src,dst}          the RTT its paths configure now
  collapsar_probe_requests_total{src,dst}                  echo requests up to the last answered one
  collapsar_probe_replies_total{src,dst}                   echoes answered (loss over a window:
                                                           1 - rate(replies) / rate(requests))
  collapsar_workload_requests_total{client,status}         wl-client requests by status (ok, err, timeout)
  collapsar_workload_latency_seconds{client}               histogram of its OK requests' latency
                                                           (p99: histogram_quantile(0.99, rate(..._bucket[1m])))
  collapsar_throughput_bps, collapsar_experiment_time_us,
  collapsar_event_lateness_max_us                          (older names, kept)
"""

from __future__ import annotations

LATENESS_BUCKETS_S = (0.0001, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.05, 0.1, 1.0)


def _label(value: object) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(**labels: object) -> str:
    return "{" + ",".join(f'{name}="{_label(value)}"' for name, value in labels.items()) + "}"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.9g}"


class _Exposition:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(self, name: str, kind: str, help_text: str, samples: list[tuple[str, float]]) -> None:
        """A metric family: its HELP and TYPE, then (labels, value) samples."""
        self.lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        self.lines += [f"{name}{labels} {_number(value)}" for labels, value in samples]


def _histogram(out: _Exposition, name: str, help_text: str, rows: list[tuple[dict, list, list, int, float]]) -> None:
    """A histogram family: per (labels, bounds, cumulative counts, count, sum)."""
    out.family(name, "histogram", help_text, [])
    for labels, bounds, cumulative, count, total in rows:
        for bound, below in zip(bounds, cumulative):
            out.lines.append(f"{name}_bucket{_labels(**labels, le=f'{bound:g}')} {below}")
        out.lines.append(f"{name}_bucket{_labels(**labels, le='+Inf')} {count}")
        out.lines.append(f"{name}_sum{_labels(**labels)} {_number(total)}")
        out.lines.append(f"{name}_count{_labels(**labels)} {count}")


def _probe(out: _Exposition, rows: list[dict]) -> None:
    pair = lambda r: _labels(src=r["src"], dst=r["dst"])  # noqa: E731
    out.family(
        "collapsar_probe_rtt_seconds",
        "gauge",
        "The probed pair's last echo's round-trip time",
        [(pair(r), r["rtt_ms"] / 1000) for r in rows],
    )
    out.family(
        "collapsar_probe_configured_rtt_seconds",
        "gauge",
        "The round-trip time the pair's paths configure now",
        [(pair(r), r["configured_rtt_ms"] / 1000) for r in rows if r.get("configured_rtt_ms") is not None],
    )
    out.family(
        "collapsar_probe_requests_total",
        "counter",
        "Echo requests sent up to the last one answered",
        [(pair(r), r["requests"]) for r in rows],
    )
    out.family(
        "collapsar_probe_replies_total", "counter", "Echo requests answered", [(pair(r), r["replies"]) for r in rows]
    )


def _workload(out: _Exposition, clients: list[dict]) -> None:
    out.family(
        "collapsar_workload_requests_total",
        "counter",
        "wl-client requests resolved, by status",
        [(_labels(client=c["client"], status=status), n) for c in clients for status, n in c["requests"].items()],
    )
    _histogram(
        out,
        "collapsar_workload_latency_seconds",
        "Latency of the wl-client's successful requests",
        [
            (
                {"client": c["client"]},
                c["latency_buckets_s"],
                c["latency_cumulative"],
                c["latency_count"],
                c["latency_sum_s"],
            )
            for c in clients
        ],
    )


def metrics_text(snapshot: dict) -> str:
    out = _Exposition()
    out.family(
        "collapsar_run_info",
        "gauge",
        "The run: its id, experiment file, mode and state",
        [
            (
                _labels(
                    run_id=snapshot.get("run_id", ""),
                    source=snapshot.get("source", ""),
                    mode=snapshot.get("mode", ""),
                    state=snapshot.get("state", ""),
                ),
                1,
            )
        ],
    )
    out.family(
        "collapsar_experiment_time_seconds",
        "gauge",
        "Time since t=0 of the experiment",
        [("", snapshot.get("t_us", 0) / 1e6)],
    )
    out.family(
        "collapsar_instance_up",
        "gauge",
        "1 if the instance's command is running",
        [
            (_labels(instance=i["name"], status=i["status"]), 1 if i["status"] == "up" else 0)
            for i in snapshot.get("instances", [])
        ],
    )
    throughput = snapshot.get("throughput", [])
    pair = lambda f: _labels(src=f["src"], dst=f["dst"])  # noqa: E731
    out.family(
        "collapsar_sent_bytes_total",
        "counter",
        "Bytes sent per destination (eBPF counters)",
        [(pair(f), f["bytes"]) for f in throughput],
    )
    out.family(
        "collapsar_flow_rate_bits_per_second",
        "gauge",
        "Measured send rate of the pair over the last 1 s window (wire bits)",
        [(pair(f), f["rate_bps"]) for f in throughput],
    )
    flows = snapshot.get("flows", [])
    out.family(
        "collapsar_flow_configured_bits_per_second",
        "gauge",
        "Rate of the pair's path now (no sample: unlimited or cut)",
        [(pair(f), f["configured_bps"]) for f in flows if f.get("configured_bps") is not None],
    )
    out.family(
        "collapsar_flow_cut",
        "gauge",
        "1 if the pair's path is cut",
        [(pair(f), 1 if f.get("cut") else 0) for f in flows],
    )
    shared = [f for f in snapshot.get("sharing", {}).get("flows", []) if f.get("local", True)]
    out.family(
        "collapsar_flow_share_bits_per_second",
        "gauge",
        "Rate the sharing loop allows the pair (its path's, or less on a shared link)",
        [(pair(f), f["allowed_bps"]) for f in shared if f.get("allowed_bps") is not None],
    )
    out.family(
        "collapsar_flow_congestion_loss_ratio",
        "gauge",
        "Loss the sharing loop charges the pair for an oversubscribed link",
        [(pair(f), f.get("congestion_loss_ratio", 0.0)) for f in shared],
    )
    sides = [
        (_labels(link=link["id"], a=link.get("a", ""), b=link.get("b", ""), direction=direction), link[direction])
        for link in snapshot.get("links", [])
        for direction in ("up", "down")
        if link.get(direction)
    ]
    out.family(
        "collapsar_link_load_bits_per_second",
        "gauge",
        "Load of the link's busiest instance-level link, from the measured flows",
        [(labels, side["load_bps"]) for labels, side in sides],
    )
    out.family(
        "collapsar_link_capacity_bits_per_second",
        "gauge",
        "The link's rate now (no sample: unlimited)",
        [(labels, side["rate_bps"]) for labels, side in sides if side.get("rate_bps") is not None],
    )
    out.family(
        "collapsar_link_utilisation_ratio",
        "gauge",
        "Load over capacity",
        [(labels, side["utilisation"]) for labels, side in sides if side.get("utilisation") is not None],
    )
    events = snapshot.get("events", {})
    applied = events.get("applied", [])
    late_s = [e["lateness_us"] / 1e6 for e in applied]
    out.family("collapsar_events_applied", "gauge", "Timeline steps applied so far", [("", len(applied))])
    out.family("collapsar_events_pending", "gauge", "Timeline steps still to come", [("", events.get("pending", 0))])
    buckets = [(_labels(le=f"{bound:g}"), sum(1 for x in late_s if x <= bound)) for bound in LATENESS_BUCKETS_S]
    buckets.append((_labels(le="+Inf"), len(late_s)))
    out.family(
        "collapsar_event_lateness_seconds",
        "histogram",
        "How long after its time each applied timeline step was in force",
        [],
    )
    out.lines += [f"collapsar_event_lateness_seconds_bucket{labels} {count}" for labels, count in buckets]
    out.lines += [
        f"collapsar_event_lateness_seconds_sum {_number(sum(late_s))}",
        f"collapsar_event_lateness_seconds_count {len(late_s)}",
    ]
    _probe(out, snapshot.get("probe", []))
    _workload(out, snapshot.get("workload", []))
    # Older names, kept for whoever scrapes them already.
    out.family(
        "collapsar_throughput_bps",
        "gauge",
        "Measured send rate per destination (see collapsar_flow_rate_bits_per_second)",
        [(pair(f), f["rate_bps"]) for f in throughput],
    )
    out.family(
        "collapsar_experiment_time_us",
        "gauge",
        "Time since t=0, in microseconds (see collapsar_experiment_time_seconds)",
        [("", snapshot.get("t_us", 0))],
    )
    out.family(
        "collapsar_event_lateness_max_us",
        "gauge",
        "Largest lateness of an applied step, in microseconds",
        [("", max((e["lateness_us"] for e in applied), default=0))],
    )
    return "\n".join(out.lines) + "\n"
