"""collapsar.manager.container: the emulation manager for Docker containers.

Container mode differs from local mode (collapsar.manager.local.run) only in
where network namespaces come from and how instance lifecycle events act,
which is its InstanceRuntime (runtime.py): the instances are the
experiment's containers on this node (found through the Docker API and its
events stream), and join / leave / crash start, stop and kill those
containers.  The run itself (loop, signals, status, teardown) is the run
skeleton both modes share (collapsar.manager.run.skeleton), and shaping
(EmulationCore), the timeline player and the counters are local mode's.

  engine     the Docker API: this experiment's containers, addresses, events,
             start / stop / kill, and Swarm's scale-up for joins
  nsbind     a container's network namespace under /run/netns, by its pid
  dnsaddr    other Swarm nodes' instances, from the overlay's DNS
  dnswire    the DNS wire format dnsaddr needs (A, PTR), every read bounded
  meter      local mode's Meter, attaching counters as containers come and go
  hostsfile  instance names in each container's /etc/hosts, and the shaped mark
  inroot     opening those files so that no path leads out of the container
  run        ContainerRun: the skeleton plus reconciling scans with what is shaped
  runtime    DockerRuntime: join / leave / crash through the engine
  options    ContainerOptions: what container mode takes beyond every run's options
  sharing    the sharing loop on Swarm: the key, the overlay address, the peers
  bootstrap  Swarm's global service that starts the privileged manager
"""
