"""collapsar.manager.local (folder emulation-manager/local/): local mode,
`collapsar run`: the experiment on this host, from nothing back to nothing.

  run         LocalRun: the run skeleton with namespaces it makes itself
  runtime     NamespaceRuntime: commands under `ip netns exec`
  supervisor  start, stop, kill and reap each instance's command
  netns       bridge, namespaces, veths, addresses, hosts files (pyroute2)
  firewall    let the run's bridge forward when the host firewall drops
  cgroups     the host's control groups: where each controller lives (v1, v2)
  limits      cpus, cpuset, cpu-speed and memory per instance: its groups, joining them, OOM kills
  rundir      run directory, write-ahead journal, host-wide lock, state directory
  cleanup     which run `collapsar cleanup` means and what its journal lets it undo
  teardown    carry out a cleanup plan (end of run, or `collapsar cleanup`)
  outputs     what a run writes and prints about itself; instances that failed

Does not own: shaping (core.py), the loop and the status snapshot (run/),
containers (container/).
"""
