"""collapsar.tcal: the traffic-control abstraction layer.

The only code that touches the kernel's traffic control.  It turns one
instance's collapsed paths into an htb/netem/u32 tree on that instance's egress
interface, changes it in place while an experiment runs, and reads
per-destination byte counters from an eBPF program at clsact egress.

Modules: `plan` decides every number (pure, `--dry-run`), `layout` the
handles and the u32 hash, `dist` makes netem's jitter tables, `nlmsg` packs
the netlink messages, `nlsock` sends them in batches inside a network
namespace, `tree` keeps the kernel's tree in step (`TcTree`), `prepared`
puts a whole timeline step in force at one instant (`PreparedStep`, with
`fire/`), `check` probes the kernel first (`check_kernel`).  The eBPF counters live in `bpf/` and
`counters`.
"""

from collapsar.tcal.check import check_kernel
from collapsar.tcal.plan import Shaping, TreePlan, plan_tree
from collapsar.tcal.tree import TcTree

__all__ = ["Shaping", "TcTree", "TreePlan", "check_kernel", "plan_tree"]
