"""Where a run's latency goes: the analysis behind `collapsar trace RUNDIR`.

Owns, one module each:
- `load`: reading a run directory (workload/*.spans.jsonl in the workload
  tools' OTLP/JSON format, t0, events.json, experiment.yaml) into compact
  span columns;
- `critical`: each request's critical path through its spans (fan-outs,
  quorums, retries) cut into network, compute, storage and wait parts
  that add up to the request's duration;
- `expect`: the round-trip time the topology configured between two
  instances at a time of the run (the experiment's timeline, lined up with
  the event log);
- `report`: per-client latency summaries and per-part medians, as a table
  or as the JSON object `collapsar trace --json` prints.

Does not own: writing spans (workload-node/), collecting them into the run
directory (collapsar.manager), the topology math (collapsar.collapse and
collapsar.timeline, which `expect` only reads).
"""
