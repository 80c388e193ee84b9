"""collapsar.manager.run (folder emulation-manager/run/): what every manager
run does, written once for local and container mode.

  skeleton    ManagerRun: the timeline's actuator, signals, the loop, teardown
  runtime     InstanceRuntime: what a mode provides (discover, start, stop, kill)
  options     RunOptions: what every run takes
  snapshot    the status snapshot's schema (the README documents it)
  stallwatch  a loop that stops turning is reported, with every thread's stack
  awake       keep a virtual machine's CPUs from halting during a run

Does not own: how instances start (local/runtime.py, container/runtime.py),
shaping (core.py), the HTTP server (status/).
"""
