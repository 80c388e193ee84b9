"""collapsar.manager (folder emulation-manager/): the per-host emulation manager.

Owns: running one experiment on this host: making or finding each
instance's network place, one emulation core per instance (its egress
shaping through the TCAL), the timeline player, bandwidth sharing between
managers, the status API, and what a run measures and reports.  Does not
own: parsing, collapsing or the timeline (collapsar), tc and eBPF
(collapsar.tcal), the Docker deployment files (collapsar.deploy), the web
page (collapsar.dashboard).

The shared core, at the top:
  core        EmulationCore: one instance's shaping; path changes -> tc calls
  experiment  instances, commands and paths a run needs, from the timeline
  addressing  names and addresses of a run (pure)
  programs    whether each command's program is found as its instances look for it
  nsexec      create, enter and remove network namespaces (libc)
  safefiles   root's file access: trusted directories, no symlink followed
  dryrun      the per-instance tc plan for `--dry-run`

One folder per concern:
  run/        the run skeleton: loop, signals, status snapshot, teardown, once
  play/       the timeline player: deadlines, steps, ad-hoc changes
  local/      local mode: namespaces this run makes, commands, journal, cleanup
  container/  container mode: Docker's containers on this node
  sharing/    bandwidth sharing: the model, the loop, flow metadata over Aeron
  status/     the status API: HTTP, server-sent events, control, topology view
  measure/    what a run measures: counters, probe, flow table, workload summary

Other components import only status.control (the control API's refusal and
token check, which the dashboard proxies; pyproject's import-linter
contracts).  The deploy generator imports nothing of the manager: the
manager reads what it writes (labels, the shaped mark, the subnet) from
collapsar.deploy.naming and collapsar.deploy.subnet.
"""
