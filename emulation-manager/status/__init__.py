"""collapsar.manager.status (folder emulation-manager/status/): the status
API on 127.0.0.1 and what it serves.

  api       StatusServer: JSON, server-sent events, Prometheus, the web page
  board     the snapshots the API serves, each encoded once; /paths rows
  streams   every server-sent-event client, served from one thread
  guard     the API's limits: deadlines, caps, a 500 for a failed handler
  gate      the thread that accepts, holds idle connections, answers 503
  control   POST /control/*: start, stop, ad-hoc link changes, the token
  topoview  what the dashboard draws: the topology and its load now

Does not own: what a snapshot holds (run/snapshot.py), the page itself
(collapsar.dashboard).
"""
