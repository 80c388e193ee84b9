// The report of a set of runs (collapsar.report.sets): per swept value the
// mean of every figure with its 95% confidence interval as a band, the
// runs' spread (min and max), and, for a sweep, each figure against the
// swept value.
import uPlot from "uplot";
import { el } from "./dom.js";
import * as fmt from "./format.js";
import { COLORS, HEIGHT, HELD, OVER_SECOND_BEFORE, SMALL_HEIGHT, SMALL_WIDTH, WIDTH, data, section, state,
  table } from "./reportparts.js";

const BAND = "rgba(37, 99, 235, 0.18)";

function meanCi(s, scale = 1, digits = 3) {
  if (!s) return "–";
  const mean = +(s.mean / scale).toPrecision(digits);
  if (!s.ci95) return `${mean} (1 run)`;
  const half = +((s.ci95[1] - s.ci95[0]) / 2 / scale).toPrecision(2);
  return `${mean} ± ${half}`;
}

// Mean with its interval as a band, and the runs' min and max, over x.
function spreadChart(parent, id, title, x, spread, unit, extra = [], opts = {}) {
  const box = el("div", { class: opts.small ? "chart small" : "chart", chart: id }, el("h3", {}, title));
  parent.append(box);
  const yValues = unit === "rate" ? (u, ticks) => ticks.map((v) => fmt.shortRate(v))
    : (u, ticks) => ticks.map((v) => `${+v.toFixed(3)}${unit}`);
  // Over time a figure is the one of the second before its time (as in a
  // single run's report); against a swept value, a point per value.
  const paths = opts.points ? {} : { paths: OVER_SECOND_BEFORE, points: { show: false } };
  const series = [{ label: opts.xLabel || "t (s)" },
    { label: "mean", stroke: COLORS[0], width: 2, points: { show: !!opts.points, size: 8, fill: COLORS[0] }, ...paths },
    { label: "95% CI low", stroke: BAND, width: 1, ...paths }, { label: "95% CI high", stroke: BAND, width: 1, ...paths },
    { label: "min", stroke: "#9ca3af", dash: [2, 3], width: 1, ...paths },
    { label: "max", stroke: "#9ca3af", dash: [2, 3], width: 1, ...paths },
    ...extra.map((line, i) => ({ label: line.label, stroke: COLORS[(i + 1) % COLORS.length], dash: [6, 3],
      width: 1.5, ...(line.paths ? { paths: line.paths } : {}) }))];
  const plot = new uPlot({
    width: opts.small ? SMALL_WIDTH : WIDTH, height: opts.small ? SMALL_HEIGHT : HEIGHT,
    scales: { x: { time: false } },
    axes: [{ label: opts.xLabel || "t (s)", grid: { stroke: "#eef0f3" },
      ...(opts.xNames ? { values: (u, ticks) => ticks.map((t) => opts.xNames[t] ?? "") } : {}) },
    { size: 60, values: yValues, grid: { stroke: "#eef0f3" } }],
    series,
    bands: [{ series: [3, 2], fill: BAND }],
  }, [x, spread.mean, spread.lo, spread.hi, spread.min, spread.max, ...extra.map((l) => l.values)], box);
  state.charts.push({ id, plot, box });
}

function header() {
  const sweep = data.sweep;
  document.title = `Collapsar report: ${data.experiment || "set of runs"}`;
  document.getElementById("title").textContent = `${data.experiment || "experiment"} · ${data.repeat} runs`
    + (sweep ? ` for each of ${sweep.values.length} values of ${sweep.path}` : "");
  const rows = data.variants.map((v) => [sweep ? `${sweep.path}=${v.value}` : "all runs", v.runs.join(", ") || "–",
    v.failed.map((f) => `${f.run_id} (exit ${f.exit_code}: ${f.error || ""})`).join("; ")]);
  const about = section("The runs", table(["", "completed", "failed (left out)"], rows));
  about.id = "about";
  about.append(el("p", { class: "muted" }, "Each figure: the mean over the completed runs, its 95% confidence "
    + "interval (Student's t) as a band, and the runs' min and max dotted."));
  if (data.notes.length) about.append(el("ul", { class: "notes" }, ...data.notes.map((n) => el("li", {}, n))));
}

// Each figure against the swept value: mean, interval and spread.
function sweepCharts() {
  const sweep = data.sweep;
  const done = data.variants.filter((v) => v.aggregate);
  if (!sweep || done.length < 2) return;
  const part = section(`Against ${sweep.path}`);
  const grid = el("div", { class: "grid" });
  part.append(grid);
  const x = done.map((v, i) => i);
  const names = done.map((v) => v.value);
  const pick = (get) => {
    const s = done.map((v) => get(v.aggregate));
    return { mean: s.map((v) => v?.mean ?? null), lo: s.map((v) => v?.ci95?.[0] ?? v?.mean ?? null),
      hi: s.map((v) => v?.ci95?.[1] ?? v?.mean ?? null), min: s.map((v) => v?.min ?? null),
      max: s.map((v) => v?.max ?? null) };
  };
  const opts = { xLabel: sweep.path, xNames: names, points: true };
  const flows = done[0].aggregate.flows.slice(0, 6);
  flows.forEach((flow, i) => {
    const first = (a) => a.flows.find((f) => f.src === flow.src && f.dst === flow.dst)?.segments[0]?.measured_bps;
    spreadChart(grid, `sweep-flow-${i}`, `${flow.src} → ${flow.dst}: measured rate, first stretch`, x, pick(first),
      "rate", [], opts);
  });
  const clients = done[0].aggregate.workload;
  clients.slice(0, 6).forEach((client, i) => {
    for (const q of ["p50_ms", "p99_ms"]) {
      const get = (a) => a.workload.find((c) => c.client === client.client)?.[q];
      spreadChart(grid, `sweep-${q}-${i}`, `${client.client}: ${q.replace("_ms", "")} latency`, x, pick(get),
        " ms", [], opts);
    }
  });
  if (done.some((v) => v.aggregate.lateness.p99_ms)) {
    spreadChart(grid, "sweep-lateness", "event lateness p99", x, pick((a) => a.lateness.p99_ms), " ms", [], opts);
  }
}

function variant(v, index) {
  const a = v.aggregate;
  const title = data.sweep ? `${data.sweep.path}=${v.value}` : "Over the runs";
  const part = section(`${title} (${v.runs.length} runs)`);
  if (!a) {
    part.append(el("p", { class: "muted" }, "No run completed."));
    return;
  }
  const grid = el("div", { class: "grid" });
  part.append(grid);
  a.flows.forEach((flow, i) => spreadChart(grid, `v${index}-flow-${i}`, `${flow.src} → ${flow.dst}: measured rate`,
    flow.measured.t, flow.measured, "rate", [{ label: "configured", values: flow.configured, paths: HELD }]));
  a.rtt.forEach((pair, i) => spreadChart(grid, `v${index}-rtt-${i}`, `${pair.src} → ${pair.dst} and back: median RTT`,
    pair.median.t, pair.median, " ms", [{ label: "configured", values: pair.configured, paths: HELD }], { small: true }));
  const clients = a.workload.filter((c) => c.cdfs.some((cdf) => cdf.latency_ms.length)).slice(0, 6);
  clients.forEach((client, i) => cdfChart(grid, `v${index}-cdf-${i}`, client));
  const segments = a.flows.flatMap((flow) => flow.segments.map((s) => [`${flow.src} → ${flow.dst}`,
    `${s.start_s.toFixed(1)}–${s.end_s === null ? "end" : s.end_s.toFixed(1)} s`, fmt.rate(s.configured_bps),
    `${meanCi(s.share_bps, 1e6)} Mbit/s`, `${meanCi(s.measured_bps, 1e6)} Mbit/s`, s.limited_by || ""]));
  if (segments.length) {
    part.append(table(["flow", "during", "configured", "share (median)", "measured (median)", "limited by"], segments));
  }
  if (a.workload.length) {
    part.append(table(["client", "requests", "ok", "p50 (ms)", "p90 (ms)", "p99 (ms)", "max (ms)"],
      a.workload.map((c) => [c.client, meanCi(c.requests), meanCi(c.ok), meanCi(c.p50_ms), meanCi(c.p90_ms),
        meanCi(c.p99_ms), meanCi(c.max_ms)])));
  }
  if (a.events.length) {
    part.append(table(["#", "at", "step", "lateness (ms)", "failed in"], a.events.map((e) => [e.index,
      `${e.scheduled_s} s`, e.label, meanCi(e.lateness_ms), e.errors ? `${e.errors} runs` : ""])));
    part.append(el("p", {}, `Event lateness per run: p50 ${meanCi(a.lateness.p50_ms)} ms, `
      + `p99 ${meanCi(a.lateness.p99_ms)} ms.`));
  }
}

// One client's latency CDF in every run: the spread of the distribution.
function cdfChart(grid, id, client) {
  const box = el("div", { class: "chart", chart: id }, el("h3", {}, `${client.client}: latency CDF of each run`));
  grid.append(box);
  const runs = client.cdfs.slice(0, COLORS.length);
  const plot = new uPlot({
    mode: 2, width: WIDTH, height: HEIGHT,
    scales: { x: { time: false, distr: 3 }, y: { range: [0, 1] } },
    axes: [{ label: "latency (ms)", grid: { stroke: "#eef0f3" } }, { size: 50, grid: { stroke: "#eef0f3" } }],
    series: [{}, ...runs.map((c, i) => ({ label: `run ${i + 1}`, stroke: COLORS[i === 0 ? 0 : i % COLORS.length],
      width: 1.5 }))],
  }, [null, ...runs.map((c) => {
    const keep = c.latency_ms.map((v, i) => i).filter((i) => c.latency_ms[i] > 0); // log axis
    return [keep.map((i) => c.latency_ms[i]), keep.map((i) => c.fraction[i])];
  })], box);
  state.charts.push({ id, plot, box });
}

export function renderSet() {
  header();
  sweepCharts();
  data.variants.forEach(variant);
}
