"""collapsar.manager.measure (folder emulation-manager/measure/): what a run
measures and reports about its traffic.

  throughput  per-destination rates from the TCAL's eBPF counters (Meter)
  flows       the end-of-run table: measured rate next to the configured path
  probe       RTT, jitter and loss per pair before t=0, with ping
  workload    the trace directory, and each wl-client's summary next to its
              chain's network share

Does not own: the counters themselves (collapsar.tcal), the trace analysis
(`collapsar trace`, collapsar.tracing).
"""
