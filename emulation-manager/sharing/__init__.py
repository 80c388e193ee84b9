"""collapsar.manager.sharing (folder emulation-manager/sharing/): bandwidth
sharing between the flows that cross a link, across managers (Kollaps
section 3).

  model     the RTT-aware min-max share, a pure function
  loop      one manager's per-period step: measure, exchange, narrow classes
  local     the loop bound to a run (local mode; container mode reuses it)
  bus       what a manager says and hears: the metadata bus
  metadata  the flow-metadata message: wire format, authenticated
  key       the per-run key that authenticates it
  routes    which flows a sender may report
  aeron     the Aeron transport (cffi binding of the C client)
  driver    the Aeron media driver process, one per host

Does not own: measuring (measure/throughput.py), changing classes (core.py
through the TCAL), finding peers on Swarm (container/sharing.py).
"""
