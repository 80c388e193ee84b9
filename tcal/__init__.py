"""collapsar.tcal: the traffic-control abstraction layer.

The only code that touches the kernel's traffic control.  It turns one
instance's collapsed paths into an htb/netem/u32 tree on that instance's egress
interface, changes it in place while an experiment runs, and reads
per-destination byte counters from an eBPF program at clsact egress.
"""
