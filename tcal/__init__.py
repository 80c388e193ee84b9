"""collapsar.tcal (folder tcal/): the traffic-control abstraction layer.

The only code that touches the kernel's traffic control.  It turns one
instance's collapsed paths into an htb/netem/u32 tree on that instance's egress
interface, changes it in place while an experiment runs, and reads
per-destination byte counters from an eBPF program at clsact egress.

Modules: `contract` is what a tree promises its user (the `ShapingTree`
protocol and the typed `ShapingChange` it takes), `plan` decides every
number (pure, `--dry-run`), `layout` the handles and the u32 hash, `dist`
makes netem's jitter tables, `nlmsg` packs the netlink messages, `requests`
makes those of one tree, `nlsock` sends them in batches inside a network
namespace, `tree` keeps the kernel's tree in step (`TcTree`, with what it
knows of each destination in `dest`), `link` sets the interface's GSO
limit, `prepared` puts a whole timeline step in force at one instant
(`PreparedStep`, with `fire/`), `check` probes the kernel first
(`check_kernel`).  The eBPF programs live in `bpf/`: the counters
(`counters`) and the duplicator that copies packets for a destination's
duplicate ratio (`duplicate`: netem's own cannot share a tree with other
netems).

It does not decide what to shape: the emulation manager's core turns paths
into the records this layer installs.
"""

from collapsar.tcal.check import check_kernel
from collapsar.tcal.contract import ShapingChange, ShapingTree, TreeFactory
from collapsar.tcal.plan import Shaping, TreePlan, plan_tree
from collapsar.tcal.tree import TcTree

__all__ = [
    "Shaping",
    "ShapingChange",
    "ShapingTree",
    "TcTree",
    "TreeFactory",
    "TreePlan",
    "check_kernel",
    "plan_tree",
]
