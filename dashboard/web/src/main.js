// The dashboard page: one status stream in, a few views out.  Rendering is
// throttled (a manager publishes every 50 ms); every view is rebuilt from the
// latest snapshot, so a missed message never leaves a view stale.
import "uplot/dist/uPlot.min.css";
import "./style.css";
import * as api from "./api.js";
import { Chart, History } from "./chart.js";
import { el, fill, setText } from "./dom.js";
import * as fmt from "./format.js";
import { createGraph, updateGraph } from "./graph.js";

const RENDER_EVERY_MS = 250;
const view = { topology: null, cy: null, snapshot: null, dirty: false, renders: 0,
  selected: null, history: new History() };
window.collapsarDashboard = view; // for the browser tests and for curious users
const chart = new Chart(document.getElementById("chart"));

// The line under the header: trouble (red), or how the run ended ("ended",
// or "failed" when it ended with an error).  Content is text and el() nodes.
function banner(content, kind = "") {
  const node = document.getElementById("banner");
  node.hidden = !content;
  node.className = kind ? `banner ${kind}` : "banner";
  node.replaceChildren(...(content ? [].concat(content) : []));
}

function endBanner(end) {
  const parts = [fmt.ended(end)];
  if (end.report) {
    parts.push(" Report: ", el("code", { class: "report-command" }, end.report.command),
      " (writes ", el("code", {}, end.report.path), ")");
  }
  banner(parts, end.exit_code ? "failed" : "ended");
}

function linkName(id) {
  const link = view.topology.links.find((l) => l.id === id);
  return link ? `${link.a} — ${link.b}` : `link ${id}`;
}

function renderHeader(snap) {
  setText("run", snap.run_id ? `run ${snap.run_id} · ${snap.source || ""}` : "no run");
  const state = document.getElementById("state");
  state.textContent = snap.state || "unknown";
  state.className = `badge ${snap.state || ""}`;
  setText("clock", `t = ${fmt.seconds(snap.t_us || 0)}`);
  document.getElementById("start").disabled = snap.state !== "waiting";
  document.getElementById("stop").disabled = !["running", "waiting"].includes(snap.state);
  document.getElementById("link-apply").disabled = snap.state === "ended";
  const managers = snap.managers || [];
  fill(document.getElementById("managers"), managers.map((m) => el("span",
    { class: `badge manager ${m.state}`, title: m.error || m.url },
    `${m.host}: ${m.state}${m.error ? " (" + m.error + ")" : ""}`)));
  const down = managers.filter((m) => m.state === "unreachable");
  if (snap.state === "ended") endBanner(snap.end || {});
  else if (down.length) banner(`${down.length} manager(s) unreachable: ${down.map((m) => `${m.host}: ${m.error}`).join("; ")}`);
}

function renderInstances(snap) {
  const rows = (snap.instances || []).map((inst) => el("tr", { class: `st-${inst.status.replace(/\(.*/, "")}` },
    el("td", {}, inst.name), el("td", {}, inst.host || "local"), el("td", {}, inst.ip || ""),
    el("td", {}, inst.status), el("td", {}, inst.network || ""), el("td", {}, fmt.bucket(inst.egress))));
  fill(document.querySelector("#instances tbody"), rows);
}

// The bandwidth-sharing loop's share per flow, when the run shares (sharing.flows).
function shares(snap) {
  const map = new Map();
  for (const f of snap.sharing?.flows || []) map.set(`${f.src}>${f.dst}`, f.share_bps ?? null);
  return map;
}

function renderFlows(snap) {
  const shared = shares(snap);
  const flows = (snap.flows || []).filter((f) => f.rate_bps > 0 || f.bytes > 0);
  const rows = flows.map((f) => {
    const key = `flow:${f.src}>${f.dst}`;
    const share = f.share_bps ?? shared.get(`${f.src}>${f.dst}`) ?? null;
    const cap = share ?? f.configured_bps;
    const row = el("tr", { class: view.selected?.key === key ? "selected" : "", key },
      el("td", {}, f.src), el("td", {}, f.dst), el("td", {}, fmt.rate(f.rate_bps)),
      el("td", {}, f.cut ? "cut" : fmt.rate(f.configured_bps)),
      el("td", {}, share === null ? "–" : fmt.rate(share)),
      el("td", {}, cap ? fmt.percent(f.rate_bps / cap) : "–"));
    row.addEventListener("click", () => select({ kind: "flow", src: f.src, dst: f.dst }));
    return row;
  });
  fill(document.querySelector("#flows tbody"), rows.length ? rows
    : [el("tr", {}, el("td", { class: "muted", colspan: 6 }, "no traffic yet"))]);
}

function renderEvents(snap) {
  const events = snap.events || {};
  const fired = (events.applied || []).slice(-30).map((e) => el("li",
    { class: `fired${e.error ? " failed" : ""}${e.adhoc ? " adhoc" : ""}` },
    el("span", { class: "when" }, fmt.seconds(e.scheduled_us)), " ", e.label, " ",
    el("span", { class: "late" }, `late ${fmt.millis(e.lateness_us)}`),
    e.error ? el("span", { class: "error" }, ` ${e.error}`) : ""));
  const now = el("li", { class: "now" }, `now ${fmt.seconds(snap.t_us || 0)}`);
  const pending = (events.upcoming || []).map((e) => el("li", { class: "pending" },
    el("span", { class: "when" }, fmt.seconds(e.at_us)), " ", e.label));
  const more = events.pending > pending.length ? [el("li", { class: "pending muted" },
    `… ${events.pending - pending.length} more`)] : [];
  fill(document.getElementById("events"), [...fired, now, ...pending, ...more]);
}

function record(snap) {
  const t = (snap.t_us || 0) / 1e6;
  for (const link of snap.links || []) {
    view.history.push(`link:${link.id}`, t, [link.up?.load_bps ?? null, link.down?.load_bps ?? null,
      link.up?.rate_bps ?? null]);
  }
  const shared = shares(snap);
  for (const f of snap.flows || []) {
    const key = `${f.src}>${f.dst}`;
    view.history.push(`flow:${key}`, t, [f.rate_bps, f.configured_bps, shared.get(key) ?? null]);
  }
}

function renderSelected(snap) {
  const sel = view.selected;
  if (!sel) return;
  if (sel.kind === "link") {
    const live = (snap.links || []).find((l) => l.id === sel.id);
    setText("selected-name", linkName(sel.id));
    const parts = live ? [live.present ? "present" : "gone", live.degraded ? "degraded" : "",
      live.up ? `→ ${fmt.props(live.up)}, load ${fmt.rate(live.up.load_bps)} (${fmt.percent(live.up.utilisation)})` : "",
      live.down ? `← ${fmt.props(live.down)}, load ${fmt.rate(live.down.load_bps)} (${fmt.percent(live.down.utilisation)})` : ""] : [];
    setText("selected-detail", parts.filter(Boolean).join(" · "));
    chart.show(sel.key, ["load →", "load ←", "rate"], view.history.get(sel.key));
  } else {
    setText("selected-name", `flow ${sel.src} → ${sel.dst}`);
    const f = (snap.flows || []).find((x) => x.src === sel.src && x.dst === sel.dst);
    setText("selected-detail", f ? `measured ${fmt.rate(f.rate_bps)}, configured ${fmt.rate(f.configured_bps)}` : "no traffic");
    chart.show(sel.key, ["measured", "configured", "share"], view.history.get(sel.key));
  }
}

function select(what) {
  const key = what.kind === "link" ? `link:${what.id}` : `flow:${what.src}>${what.dst}`;
  view.selected = { ...what, key };
  if (what.kind === "link") document.getElementById("link-select").value = String(what.id);
  view.dirty = true;
}

function render() {
  if (!view.dirty || !view.snapshot || !view.topology) return;
  view.dirty = false;
  const snap = view.snapshot;
  record(snap);
  renderHeader(snap);
  updateGraph(view.cy, view.topology, snap);
  renderInstances(snap);
  renderFlows(snap);
  renderEvents(snap);
  renderSelected(snap);
  view.renders += 1;
  view.renderedT = snap.t_us;
}

function say(text, ok) {
  const node = document.getElementById("control-result");
  node.textContent = text;
  node.className = ok ? "ok" : "error";
}

async function act(action, body) {
  if (!api.savedToken()) { say("enter the control token first (collapsar run prints it)", false); return; }
  say(`${action}: sending…`, true);
  document.getElementById("control-result").className = "pending";
  const reply = await api.control(action, body);
  const detail = reply.body.error || reply.body.label || reply.body.state || "done";
  say(reply.ok ? `${action}: ${detail}` : `${action} refused (HTTP ${reply.status}): ${detail}`, reply.ok);
}

function wireControls() {
  const token = document.getElementById("token");
  token.value = api.savedToken();
  token.addEventListener("change", () => api.saveToken(token.value.trim()));
  document.getElementById("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    api.saveToken(token.value.trim());
  });
  document.getElementById("start").addEventListener("click", () => act("start"));
  document.getElementById("stop").addEventListener("click", () => act("stop"));
  document.getElementById("link-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const link = view.topology.links.find((l) => String(l.id) === document.getElementById("link-select").value);
    if (!link) { say("pick a link first", false); return; }
    const set = {};
    for (const key of ["latency", "jitter", "loss", "bandwidth"]) {
      const value = document.getElementById(`set-${key}`).value.trim();
      if (value) set[key] = value;
    }
    if (!Object.keys(set).length) { say("give at least one value to set", false); return; }
    act("link", { link: [link.a, link.b], set });
  });
}

async function main() {
  wireControls();
  try {
    view.topology = await api.topology();
  } catch (error) {
    banner(`cannot load the topology: ${error.message}`);
    return;
  }
  const select_ = document.getElementById("link-select");
  fill(select_, view.topology.links.map((l) => el("option", {}, `${l.a} — ${l.b}`)));
  [...select_.options].forEach((option, i) => { option.value = String(view.topology.links[i].id); });
  view.cy = createGraph(document.getElementById("graph"), view.topology, select);
  api.follow((snap) => { view.snapshot = snap; view.dirty = true; }, (trouble) => {
    if (view.snapshot?.state === "ended") return; // the run is over: its stream closing is no trouble
    banner(trouble);
    if (trouble) {
      const state = document.getElementById("state");
      state.textContent = "disconnected";
      state.className = "badge unreachable";
      document.getElementById("start").disabled = true;
      document.getElementById("stop").disabled = true;
    }
  });
  setInterval(render, RENDER_EVERY_MS);
}

main();
