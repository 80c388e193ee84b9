// The report of one run: its figures (collapsar.report.figures) as
// sections of charts and tables.
import uPlot from "uplot";
import { el } from "./dom.js";
import * as fmt from "./format.js";
import { createGraph } from "./graph.js";
import { COLORS, HEIGHT, HELD, OVER_SECOND_BEFORE, SMALL_HEIGHT, SMALL_WIDTH, WIDTH, aligned, byteCount,
  chart, data, section, state, table } from "./reportparts.js";

function header() {
  const run = data.run;
  document.title = `Collapsar report: ${run.experiment || run.run_id || "run"}`;
  document.getElementById("title").textContent = `${run.experiment || "experiment"} · run ${run.run_id || "?"}`;
  const started = run.t0_unix ? new Date(run.t0_unix * 1000).toISOString() : "never reached t=0";
  const rows = [["started (t=0)", started], ["duration", `${run.duration_s} s`], ["experiment file", run.source || "?"]];
  if (data.experiment) rows.push(["sha256", data.experiment.sha256]);
  const prov = data.provenance;
  if (prov) {
    rows.push(["kernel", `${prov.host.kernel} ${prov.host.kernel_build} (${prov.host.machine})`]);
    if (prov.host.tcp_congestion_control) rows.push(["host's TCP congestion control", prov.host.tcp_congestion_control]);
    for (const [tool, version] of Object.entries(prov.versions)) rows.push([tool, version ?? "unknown"]);
  }
  rows.push(["report made", `${new Date(data.generated.at_unix * 1000).toISOString()} by collapsar ${data.generated.collapsar}`]);
  const about = section("What produced this", table(["", ""], rows));
  about.id = "about";
  if (data.experiment) {
    about.append(el("details", {}, el("summary", {}, `the experiment as run (${data.experiment.bytes} bytes)`),
      el("pre", { class: "source" }, data.experiment.text)));
  }
  if (data.notes.length) about.append(el("ul", { class: "notes" }, ...data.notes.map((n) => el("li", {}, n))));
}

function topology() {
  if (!data.topology) return;
  const part = section("Topology");
  const box = el("div", { class: "graph" });
  part.append(box);
  state.cy = createGraph(box, data.topology, () => {});
  for (const link of data.topology.links) {
    const up = link.up ? fmt.props(link.up) : "";
    const down = link.down && JSON.stringify(link.down) !== JSON.stringify(link.up) ? ` / ${fmt.props(link.down)}` : "";
    state.cy.getElementById(`l:${link.id}`).data({ label: up + down });
  }
  const instances = data.instances.map((i) => [i.name, i.ip, i.status, i.network, i.failed ? "failed" : ""]);
  if (instances.length) part.append(table(["instance", "address", "process", "network", ""], instances));
}

function events() {
  if (!data.events.length) return;
  const part = section("Timeline events");
  const grid = el("div", { class: "grid" });
  part.append(grid);
  chart(grid, "event-lateness", "lateness of each step (ms)", data.events.map((e) => e.applied_s ?? e.scheduled_s),
    [{ label: "lateness", values: data.events.map((e) => e.lateness_ms), points: true }], " ms");
  part.append(table(["#", "at", "applied", "lateness", "step", "error"], data.events.map((e) => [
    e.index, `${e.scheduled_s} s`, e.applied_s === null ? "–" : `${e.applied_s} s`,
    e.lateness_ms === null ? "–" : `${e.lateness_ms.toFixed(3)} ms`, e.label + (e.adhoc ? " (ad hoc)" : ""),
    e.error || ""])));
}

function flows() {
  const f = data.flows;
  if (!f.series.length && !f.table.length) return;
  const part = section(`Flows (${f.total} sent; measured at the sender, wire bits)`);
  const grid = el("div", { class: "grid" });
  part.append(grid);
  f.series.forEach((s, i) => chart(grid, `flow-${i}`, `${s.src} → ${s.dst}`, s.t, [
    { label: "measured", values: s.measured, paths: OVER_SECOND_BEFORE },
    { label: "configured", values: s.configured, dash: [6, 3], paths: HELD },
    { label: "share", values: s.share, dash: [2, 2], paths: HELD },
  ], "rate", { events: data.events }));
  // The end table of the run, busiest flows first; small ones folded away.
  const flowsByBytes = [...f.table].sort((a, b) => (b.bytes || 0) - (a.bytes || 0));
  const rowsOf = (flow) => (flow.segments || []).map((seg) => [`${flow.src} → ${flow.dst}`,
    `${seg.start_s.toFixed(2)}–${seg.end_s === null ? "end" : seg.end_s.toFixed(2)} s`,
    fmt.rate(seg.configured_bps), fmt.rate(seg.median_share_bps), fmt.rate(seg.median_rate_bps),
    seg.limited_by || "", byteCount(flow.bytes)]);
  const head = ["flow", "during", "configured", "share (median)", "measured (median)", "limited by", "sent"];
  const shown = flowsByBytes.slice(0, Math.max(f.series.length, 1));
  if (shown.length) part.append(table(head, shown.flatMap(rowsOf)));
  const rest = flowsByBytes.slice(shown.length);
  if (rest.length) {
    part.append(el("details", {}, el("summary", {}, `${rest.length} smaller flows`), table(head, rest.flatMap(rowsOf))));
  }
}

function links() {
  const series = data.links.series;
  if (!series.length) return;
  const part = section("Link utilisation (busiest instance-level link of each)");
  const grid = el("div", { class: "grid" });
  part.append(grid);
  const { t, columns } = aligned(series, (s) => s.utilisation);
  chart(grid, "link-utilisation", "utilisation", t, series.map((s, i) => ({
    label: `${s.a} ${s.direction === "up" ? "→" : "←"} ${s.b}`, values: columns[i], paths: OVER_SECOND_BEFORE })),
  "", { events: data.events });
}

function rtt() {
  const series = data.rtt.series;
  const part = section("Round-trip time and loss (in-run probe)");
  if (!series.length) {
    part.append(el("p", { class: "muted" }, "Not measured: run with --probe-every INTERVAL to see RTT and loss over time."));
  }
  const grid = el("div", { class: "grid" });
  part.append(grid);
  series.forEach((s, i) => chart(grid, `rtt-${i}`, `${s.src} → ${s.dst} and back`, s.t, [
    { label: "median", values: s.median, paths: OVER_SECOND_BEFORE },
    { label: "min", values: s.min, dash: [2, 2], paths: OVER_SECOND_BEFORE },
    { label: "max", values: s.max, dash: [2, 2], paths: OVER_SECOND_BEFORE },
    { label: "configured", values: s.configured, dash: [6, 3], paths: HELD },
  ], " ms", { events: data.events, width: SMALL_WIDTH, height: SMALL_HEIGHT }));
  lossChart(grid);
}

function lossChart(grid) {
  const probes = data.rtt.series.filter((s) => s.loss.some((l) => l > 0))
    .map((s) => ({ label: `probe ${s.src} ⇄ ${s.dst}`, t: s.t, values: s.loss }));
  const charged = data.flows.series.filter((s) => s.loss.some((l) => l > 0))
    .map((s) => ({ label: `congestion ${s.src} → ${s.dst}`, t: s.t, values: s.loss }));
  const lines = [...probes, ...charged].slice(0, COLORS.length);
  if (!lines.length) {
    grid.append(el("p", { class: "muted" }, "No loss: no probe echo was lost and no flow was charged congestion loss."));
    return;
  }
  const { t, columns } = aligned(lines, (s) => s.values);
  chart(grid, "loss", "loss ratio", t, lines.map((l, i) => ({ label: l.label, values: columns[i],
    paths: OVER_SECOND_BEFORE })), "",
    { events: data.events });
}

function workload() {
  const w = data.workload;
  if (!w) return;
  const part = section("Workload latency");
  const grid = el("div", { class: "grid" });
  part.append(grid);
  const clients = w.clients.filter((c) => c.cdf.latency_ms.length).slice(0, COLORS.length);
  if (clients.length) {
    // A CDF per client: each its own x values, so one uPlot per client set
    // on a shared log axis would need aligned data; mode 2 does not.
    const box = el("div", { class: "chart", chart: "latency-cdf" }, el("h3", {}, "latency CDF (OK requests)"));
    grid.append(box);
    const plot = new uPlot({
      mode: 2, width: WIDTH, height: HEIGHT,
      scales: { x: { time: false, distr: 3 }, y: { range: [0, 1] } },
      axes: [{ label: "latency (ms)", grid: { stroke: "#eef0f3" } }, { size: 50, grid: { stroke: "#eef0f3" } }],
      series: [{}, ...clients.map((c, i) => ({ label: c.client, stroke: COLORS[i], width: 1.5 }))],
    }, [null, ...clients.map((c) => {
      const keep = c.cdf.latency_ms.map((v, i) => i).filter((i) => c.cdf.latency_ms[i] > 0); // log axis
      return [keep.map((i) => c.cdf.latency_ms[i]), keep.map((i) => c.cdf.fraction[i])];
    })], box);
    state.charts.push({ id: "latency-cdf", plot, box });
  }
  w.clients.slice(0, COLORS.length).forEach((c, i) => {
    if (!c.per_second.t.length) return;
    chart(grid, `latency-${i}`, `${c.client}: latency of the requests sent each second`, c.per_second.t, [
      { label: "p50", values: c.per_second.p50_ms, paths: OVER_SECOND_BEFORE },
      { label: "p99", values: c.per_second.p99_ms, paths: OVER_SECOND_BEFORE },
    ], " ms", { events: data.events });
  });
  const ms = (v) => (v === null ? "–" : `${v} ms`);
  part.append(table(["client", "requests", "ok", "err", "timeout", "p50", "p90", "p99", "max"],
    w.clients.map((c) => [c.client, c.requests, c.ok, c.err, c.timeout, ms(c.p50_ms), ms(c.p90_ms), ms(c.p99_ms), ms(c.max_ms)])));
  if (w.breakdown_text.length) {
    part.append(el("h3", {}, "Where the latency goes (collapsar trace)"),
      el("pre", { class: "breakdown" }, w.breakdown_text.join("\n")));
  }
}

export function renderRun() {
  header();
  topology();
  flows();
  links();
  rtt();
  events();
  workload();
}
