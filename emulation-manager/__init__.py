"""collapsar.manager: the per-host emulation manager.

Owns: making instances' network places and running one emulation core per
instance, the timeline player, the status API, and (from the Aeron side)
the flow-metadata codec, transport and bandwidth-sharing model.  Does not
own: parsing, collapsing or the timeline (collapsar), tc and eBPF
(collapsar.tcal), Docker deployment (collapsar.deploy).

Local mode (`collapsar run`), one concept per module:
  addressing  names and addresses of a run (pure)
  experiment  instances, commands and paths a run needs, from the timeline
  programs    whether each command's program is found as its instances look for it
  rundir      run directory, write-ahead journal, host-wide lock, the state directory
  cleanup_plan which run cleanup means and what its journal lets it undo (records checked)
  safefiles   root's file access: trusted directories, no symlink followed
  nsexec      create/enter network namespaces (libc)
  netns       bridge, namespaces, veths, addresses, hosts files (pyroute2)
  core        one instance's shaping through the TCAL; path changes -> tc calls
  supervisor  commands inside namespaces: start, leave, crash, reap
  scheduler   absolute-deadline firing with an event log of lateness
  player      timeline steps -> what to change on this host
  throughput  measured per-destination rates from the eBPF counters
  status      HTTP JSON, server-sent events and Prometheus on 127.0.0.1
  board       the snapshots the status API serves, each encoded once
  streams     every server-sent-event client, served from one thread
  httpguard   the API's limits: deadlines, caps, a 500 for a failed handler
  httpgate    the thread that accepts, holds idle connections, answers 503
  teardown    carry out a cleanup plan (end of run, or `collapsar cleanup`)
  dryrun      the per-instance tc plan for `--dry-run`
  outputs     what a run writes and prints about itself; instances that failed on their own
  workload_report  the trace directory, and each wl-client's summary next to its chain's network share
  local       LocalRun: the whole run, in order

Other components import only these (pyproject's import-linter contracts):
addressing (run names and subnets), control (the control API's refusal and
token check, for the dashboard), container.hostsfile (SHAPED_MARK, the file
generated stacks wait for).

Sharing loop (written separately): metadata (wire format, authenticated),
share_key (the run's key), share_routes (which flows a sender may report),
aeron (transport), sharing (RTT-aware min-max model).
"""
