// A small time series of the selected link (load per direction and its
// rate) or flow (measured next to configured), drawn with uPlot.
import uPlot from "uplot";
import { shortRate } from "./format.js";

const KEEP = 240; // samples per series: a minute at four per second

export class History {
  constructor() { this.series = new Map(); }

  push(key, t, values) {
    let s = this.series.get(key);
    if (!s) { s = { t: [], values: values.map(() => []) }; this.series.set(key, s); }
    s.t.push(t);
    values.forEach((v, i) => s.values[i].push(v));
    if (s.t.length > KEEP) { s.t.shift(); s.values.forEach((v) => v.shift()); }
  }

  get(key) { return this.series.get(key); }
}

export class Chart {
  constructor(container) { this.container = container; this.plot = null; this.key = null; }

  show(key, names, data) {
    if (!data) return;
    const columns = [data.t, ...data.values];
    if (this.key !== key || !this.plot) {
      if (this.plot) this.plot.destroy();
      const colors = ["#38bdf8", "#f59e0b", "#a3e635"];
      this.plot = new uPlot({
        width: Math.max(280, this.container.clientWidth - 8), height: 170,
        scales: { x: { time: false } },
        axes: [
          { stroke: "#9aa3ae", grid: { stroke: "#262b33" }, label: "t (s)" },
          { stroke: "#9aa3ae", grid: { stroke: "#262b33" }, size: 52,
            values: (u, ticks) => ticks.map((v) => shortRate(v)) },
        ],
        series: [{}, ...names.map((label, i) => ({ label, stroke: colors[i], width: 2,
          value: (u, v) => (v === null ? "–" : shortRate(v)) }))],
      }, columns, this.container);
      this.key = key;
    } else {
      this.plot.setData(columns);
    }
  }
}
