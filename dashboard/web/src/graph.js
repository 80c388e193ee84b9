// The topology graph: services and bridges as nodes, links as edges; the
// live snapshot restyles them (classes), it never rebuilds the graph.
import cytoscape from "cytoscape";
import fcose from "cytoscape-fcose";
import { percent, shortRate } from "./format.js";

cytoscape.use(fcose);

const STYLE = [
  { selector: "node", style: {
    "label": "data(label)", "font-size": 11, "color": "#e8eaed", "text-valign": "bottom",
    "text-margin-y": 4, "text-outline-width": 2, "text-outline-color": "#15181d",
    "min-zoomed-font-size": 8, // labels appear as one zooms in on a large graph
    "width": 26, "height": 26, "background-color": "#3c4452", "border-width": 3,
    "border-color": "#6b7280" } },
  { selector: "node.service", style: { "shape": "ellipse" } },
  { selector: "node.bridge", style: { "shape": "round-rectangle", "width": 34, "height": 18,
    "background-color": "#2b3340" } },
  { selector: "node.up", style: { "border-color": "#34d399" } },
  { selector: "node.partial", style: { "border-color": "#fbbf24" } },
  { selector: "node.down", style: { "border-color": "#6b7280", "opacity": 0.55 } },
  { selector: "node.crashed", style: { "border-color": "#f87171" } },
  { selector: "edge", style: {
    "width": "data(width)", "line-color": "data(color)", "curve-style": "bezier",
    "label": "data(label)", "font-size": 9, "color": "#c9ced6", "text-rotation": "autorotate",
    "min-zoomed-font-size": 8,
    "text-background-color": "#15181d", "text-background-opacity": 0.85,
    "text-background-padding": 2 } },
  { selector: "edge.degraded", style: { "line-color": "#e879f9", "color": "#f5d0fe" } },
  { selector: "edge.gone", style: { "line-style": "dashed", "line-color": "#4b5563",
    "opacity": 0.6, "width": 1.5 } },
  { selector: ":selected", style: { "overlay-color": "#60a5fa", "overlay-opacity": 0.25,
    "overlay-padding": 5 } },
];

function utilisationColor(u) {
  if (u === null || u === undefined) return "#64748b";
  if (u >= 0.9) return "#ef4444";
  if (u >= 0.6) return "#f59e0b";
  if (u >= 0.05) return "#38bdf8";
  return "#64748b";
}

export function createGraph(container, topology, onSelect) {
  const elements = [];
  for (const node of topology.nodes) {
    const count = node.instances ? node.instances.length : 0;
    const label = node.kind === "service" && count > 1 ? `${node.id} ×${count}` : node.id;
    elements.push({ group: "nodes", data: { id: `n:${node.id}`, name: node.id, label },
      classes: node.kind });
  }
  for (const link of topology.links) {
    elements.push({ group: "edges", data: { id: `l:${link.id}`, link: link.id,
      source: `n:${link.a}`, target: `n:${link.b}`, label: "", width: 2, color: "#64748b" } });
  }
  const cy = cytoscape({ container, elements, style: STYLE,
    minZoom: 0.1, maxZoom: 4, boxSelectionEnabled: false });
  const big = topology.nodes.length > 60;
  // "default" quality even for hundreds of nodes: "draft" (spectral only)
  // piles up the leaves of tree-like topologies, which these usually are.
  cy.layout({ name: "fcose", quality: "default", randomize: true, animate: false,
    nodeRepulsion: big ? 20000 : 8000, idealEdgeLength: big ? 50 : 130, nodeSeparation: 80,
    numIter: 2500, packComponents: true, padding: 30 }).run();
  // A handful of nodes would otherwise be blown up to fill the panel.
  if (cy.zoom() > 1.3) { cy.zoom(1.3); cy.center(); }
  cy.on("tap", "edge", (evt) => onSelect({ kind: "link", id: evt.target.data("link") }));
  return cy;
}

// Per-service state from its instances: up, partial, down or crashed.
function serviceStates(instances) {
  const by = new Map();
  for (const inst of instances) {
    const service = inst.service;
    const entry = by.get(service) || { up: 0, crashed: 0, total: 0 };
    entry.total += 1;
    if (inst.status === "up" && inst.network === "up") entry.up += 1;
    if (inst.status === "crashed" || inst.status === "oom-killed") entry.crashed += 1; // ended by force
    by.set(service, entry);
  }
  return by;
}

function wasRate(link, side, now) {
  const written = link[side];
  if (!written || !now || written.rate_bps === now.rate_bps) return "";
  return ` (was ${shortRate(written.rate_bps)})`;
}

export function updateGraph(cy, topology, snapshot) {
  const owner = new Map();
  for (const node of topology.nodes) {
    for (const name of node.instances || []) owner.set(name, node.id);
  }
  const states = serviceStates((snapshot.instances || []).map(
    (inst) => ({ ...inst, service: owner.get(inst.name) })));
  const links = new Map((snapshot.links || []).map((l) => [l.id, l]));
  cy.batch(() => {
    for (const node of topology.nodes) {
      const ele = cy.getElementById(`n:${node.id}`);
      let cls = "up";
      if (node.kind === "service") {
        const s = states.get(node.id) || { up: 0, crashed: 0, total: 0 };
        cls = s.crashed ? "crashed" : s.up === 0 ? "down" : s.up < s.total ? "partial" : "up";
      }
      ele.classes(`${node.kind} ${cls}`);
    }
    for (const link of topology.links) {
      const live = links.get(link.id);
      const ele = cy.getElementById(`l:${link.id}`);
      if (!live) continue;
      const sides = ["up", "down"].map((d) => live[d]).filter(Boolean);
      const busiest = sides.reduce((best, s) => ((s.utilisation ?? -1) > (best?.utilisation ?? -1) ? s : best), null);
      const u = busiest ? busiest.utilisation : null;
      ele.data({
        width: live.present ? 2 + 6 * Math.min(1, u || 0) : 1.5,
        color: utilisationColor(u),
        label: live.present ? `${shortRate(sides[0]?.rate_bps)}${wasRate(link, "up", live.up)}`
          + `${u ? " · " + percent(u) : ""}` : "gone",
      });
      ele.classes([live.present ? "" : "gone", live.degraded && live.present ? "degraded" : ""].join(" ").trim());
    }
  });
}
