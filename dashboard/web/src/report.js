// The report page (embedded by `collapsar report` with its figures as a
// JSON data block), drawn with the dashboard's own libraries bundled into
// the one HTML file: it makes no request of any kind (its
// Content-Security-Policy forbids them), so it opens offline, anywhere.
import "uplot/dist/uPlot.min.css";
import "./report.css";
import { data, state } from "./reportparts.js";
import { renderRun } from "./reportrun.js";
import { renderSet } from "./reportset.js";

if (data.kind === "set") renderSet();
else renderRun();
state.ready = true;
