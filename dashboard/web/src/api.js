// Talking to the status API (a manager's, or the aggregator's, same shape).

const TOKEN_KEY = "collapsar-control-token";

export function savedToken() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

export function saveToken(token) {
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
  else sessionStorage.removeItem(TOKEN_KEY);
}

export async function topology() {
  const reply = await fetch("/topology", { cache: "no-store" });
  if (!reply.ok) throw new Error(`GET /topology: HTTP ${reply.status}`);
  return reply.json();
}

// Returns {ok, status, body}; never throws for an HTTP error.
export async function control(action, body) {
  const headers = { "Content-Type": "application/json" };
  const token = savedToken();
  if (token) headers.Authorization = `Bearer ${token}`;
  try {
    const reply = await fetch(`/control/${action}`, { method: "POST", headers,
      body: JSON.stringify(body ?? {}) });
    let data = {};
    try { data = await reply.json(); } catch { data = {}; }
    return { ok: reply.ok, status: reply.status, body: data };
  } catch (error) {
    return { ok: false, status: 0, body: { error: `cannot reach the API: ${error.message}` } };
  }
}

// A run's last snapshot has state "ended": nothing more will come, so the
// stream is closed here, before the server closes it and the browser would
// report trouble and try again.
export function follow(onSnapshot, onTrouble) {
  const source = new EventSource("/stream");
  source.addEventListener("status", (event) => {
    const snap = JSON.parse(event.data);
    if (snap.state === "ended") source.close();
    onSnapshot(snap);
  });
  source.onerror = () => onTrouble(source.readyState === EventSource.CLOSED
    ? "status stream closed"
    : "status stream lost (the run ended, or its manager cannot be reached); reconnecting…");
  source.onopen = () => onTrouble(null);
  return source;
}
