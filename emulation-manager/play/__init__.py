"""collapsar.manager.play (folder emulation-manager/play/): playing a
precomputed timeline on this host.

  scheduler   fire callbacks at absolute deadlines; the event log of lateness
  player      timeline steps -> what changes on this host (the Actuator protocol)
  live        LivePlayer: a player whose future an ad-hoc change replaces

Does not own: computing the timeline (collapsar.timeline), putting a step
in force in the kernel (collapsar.tcal.prepared), what a change does to a
run (the run is the Actuator: run/skeleton.py).
"""
