// What both report pages (one run: reportrun.js, a set of runs:
// reportset.js) draw with: sections, tables and uPlot charts with the
// timeline's events marked.
import uPlot from "uplot";
import { el } from "./dom.js";
import * as fmt from "./format.js";

export const data = JSON.parse(document.getElementById("report-data").textContent);
export const state = { data, charts: [], cy: null, ready: false };
window.collapsarReport = state; // for the browser tests and for curious users

export const COLORS = ["#2563eb", "#d97706", "#16a34a", "#dc2626", "#7c3aed", "#0891b2", "#db2777",
  "#65a30d", "#ea580c", "#4f46e5", "#0d9488", "#9333ea"];
export const WIDTH = 520;
export const HEIGHT = 200;
export const SMALL_WIDTH = 400; // the many small charts of probed pairs
export const SMALL_HEIGHT = 150;
// A measured rate is the mean over the second before its time: drawn
// across that second.  A configured rate or share is the one in force at
// its time: held until the next.
export const OVER_SECOND_BEFORE = uPlot.paths.stepped({ align: -1 });
export const HELD = uPlot.paths.stepped({ align: 1 });

export function byteCount(n) {
  if (n === null || n === undefined) return "–";
  const units = [[1e9, "GB"], [1e6, "MB"], [1e3, "kB"]];
  for (const [scale, name] of units) if (n >= scale) return `${+(n / scale).toFixed(1)} ${name}`;
  return `${n} B`;
}

export function section(title, ...children) {
  const node = el("section", { class: "part" }, el("h2", {}, title), ...children);
  document.getElementById("parts").append(node);
  return node;
}

export function table(head, rows) {
  return el("table", {}, el("thead", {}, el("tr", {}, ...head.map((h) => el("th", {}, h)))),
    el("tbody", {}, ...rows.map((row) => el("tr", {}, ...row.map((cell) => el("td", {}, cell))))));
}

// Vertical dashed lines where the timeline's steps took effect.
export function eventMarks(events) {
  return { hooks: { draw: (u) => {
    const ctx = u.ctx;
    ctx.save();
    ctx.strokeStyle = "#9ca3af";
    ctx.setLineDash([4, 4]);
    ctx.lineWidth = 1;
    for (const e of events) {
      const t = e.applied_s ?? e.scheduled_s;
      if (t < u.scales.x.min || t > u.scales.x.max) continue;
      const x = Math.round(u.valToPos(t, "x", true));
      ctx.beginPath();
      ctx.moveTo(x, u.bbox.top);
      ctx.lineTo(x, u.bbox.top + u.bbox.height);
      ctx.stroke();
    }
    ctx.restore();
  } } };
}

// One uPlot chart; `lines`: [{label, values, dash?, points?}] over `x`.
export function chart(parent, id, title, x, lines, unit, opts = {}) {
  const box = el("div", { class: opts.width ? "chart small" : "chart", chart: id }, el("h3", {}, title));
  parent.append(box);
  const yValue = unit === "rate" ? (u, ticks) => ticks.map((v) => fmt.shortRate(v))
    : (u, ticks) => ticks.map((v) => `${+v.toFixed(3)}${unit}`);
  const plot = new uPlot({
    width: opts.width || WIDTH, height: opts.height || HEIGHT,
    scales: { x: { time: false, ...(opts.xScale || {}) }, y: opts.yScale || {} },
    axes: [{ label: opts.xLabel || "t (s)", grid: { stroke: "#eef0f3" } },
      { size: 60, values: yValue, grid: { stroke: "#eef0f3" } }],
    series: [{ label: opts.xLabel || "t" }, ...lines.map((line, i) => ({
      label: line.label, stroke: line.color || COLORS[i % COLORS.length], width: 1.5,
      dash: line.dash, spanGaps: false, points: { show: false },
      ...(line.paths ? { paths: line.paths } : {}),
      ...(line.points ? { paths: () => null, points: { show: true, size: 10, fill: COLORS[0] } } : {}),
    }))],
    plugins: opts.events ? [eventMarks(opts.events)] : [],
  }, [x, ...lines.map((l) => l.values)], box);
  state.charts.push({ id, plot, box });
  return plot;
}

// Several series with their own seconds on one x axis (null where absent).
export function aligned(seriesList, pick) {
  const ts = [...new Set(seriesList.flatMap((s) => s.t))].sort((a, b) => a - b);
  const index = new Map(ts.map((t, i) => [t, i]));
  const columns = seriesList.map((s) => {
    const column = new Array(ts.length).fill(null);
    s.t.forEach((t, i) => { column[index.get(t)] = pick(s)[i]; });
    return column;
  });
  return { t: ts, columns };
}

