// Numbers as people read them; every function returns plain text.

export function rate(bps) {
  if (bps === null || bps === undefined) return "unlimited";
  const units = [[1e9, "Gbit/s"], [1e6, "Mbit/s"], [1e3, "kbit/s"]];
  for (const [scale, name] of units) {
    if (Math.abs(bps) >= scale) return `${(bps / scale).toFixed(bps >= 10 * scale ? 0 : 1)} ${name}`;
  }
  return `${Math.round(bps)} bit/s`;
}

export function shortRate(bps) {
  if (bps === null || bps === undefined) return "∞";
  if (bps >= 1e9) return `${+(bps / 1e9).toFixed(1)}G`;
  if (bps >= 1e6) return `${+(bps / 1e6).toFixed(1)}M`;
  if (bps >= 1e3) return `${+(bps / 1e3).toFixed(1)}k`;
  return `${bps}`;
}

export function seconds(us) {
  return `${(us / 1e6).toFixed(us < 10e6 ? 2 : 1)} s`;
}

export function millis(us) {
  return `${(us / 1000).toFixed(2)} ms`;
}

export function percent(ratio) {
  if (ratio === null || ratio === undefined) return "–";
  return `${Math.round(ratio * 100)}%`;
}

// An instance's egress token bucket now (the status row's `egress`): how
// long its credits last at the burst rate, or how full it is.
export function bucket(e) {
  if (!e) return "";
  const level = e.kind === "credits"
    ? `credits ${e.credits_s.toFixed(1)} s at ${rate(e.peak_bps)}, then ${rate(e.rate_bps)}`
    : `${percent(e.fill)} of ${e.depth_bytes} B at ${rate(e.rate_bps)}`;
  return e.stale ? `${level} (last read)` : level;
}

export function props(p) {
  if (!p) return "";
  const parts = [rate(p.rate_bps)];
  if (p.delay_us) parts.push(`${p.delay_us / 1000} ms`);
  if (p.jitter_us) parts.push(`±${p.jitter_us / 1000} ms`);
  if (p.loss_ratio) parts.push(`${+(p.loss_ratio * 100).toFixed(3)}% loss`);
  return parts.join(", ");
}

// A wall-clock time (unix seconds) in the reader's own time zone.
export function localTime(unixS) {
  return new Date(unixS * 1000).toLocaleTimeString();
}

// The first sentence of the banner at a run's end (the snapshot's `end`).
export function ended(end) {
  const when = end.at_unix ? ` at ${localTime(end.at_unix)}` : "";
  const clock = typeof end.t_us === "number" ? ` (t = ${seconds(end.t_us)})` : "";
  const why = end.reason ? `: ${String(end.reason).replace(/\.$/, "")}` : "";
  const code = end.exit_code ? `; exit status ${end.exit_code}` : "";
  return `Run ended${when}${clock}${why}${code}.`;
}
