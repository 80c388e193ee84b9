"""Kernel capability check: before touching anything, can this kernel do what we need?

Each piece is probed for real in a scratch network namespace of our own: a
thread unshares a fresh namespace (it exists only as long as that thread and
its socket), tries to create the qdisc or filter on its loopback device, and
the namespace disappears with it.  Nothing is parsed from module lists: a
kernel may have a feature built in, or a module it can autoload, and only
trying tells.  The first missing piece raises `EnvironmentProblem` with one line
naming it and the fix.
"""

from __future__ import annotations

import ctypes
import errno
import os
import threading

from collapsar.errors import CollapsarError, EnvironmentProblem

BTF_PATH = "/sys/kernel/btf/vmlinux"
TC_H_CLSACT = 0xFFFFFFF1
CLSACT_HANDLE = 0xFFFF0000
LOOPBACK_IFINDEX = 1  # lo is index 1 in every fresh namespace

_VM_FIX = "run with --vm (a stock distribution kernel in a VM)"


def netem_missing() -> EnvironmentProblem:
    return EnvironmentProblem(
        "this kernel has no sch_netem (delay, jitter and loss need it)",
        "install the kernel's extra modules (e.g. linux-modules-extra-$(uname -r)) or run with --vm",
    )


_MISSING = {
    "htb": (
        "this kernel has no sch_htb (bandwidth shaping needs it)",
        f"use a kernel built with CONFIG_NET_SCH_HTB or {_VM_FIX}",
    ),
    "u32": (
        "this kernel has no cls_u32 (classification by destination needs it)",
        f"use a kernel built with CONFIG_NET_CLS_U32 or {_VM_FIX}",
    ),
    "clsact": (
        "this kernel has no clsact qdisc (the eBPF traffic counters attach to it)",
        f"use a kernel built with CONFIG_NET_SCH_INGRESS or {_VM_FIX}",
    ),
    "btf": (
        f"this kernel exposes no BTF ({BTF_PATH} is missing; the eBPF counters are built against it)",
        f"use a kernel built with CONFIG_DEBUG_INFO_BTF=y (Debian 11+ and Ubuntu 20.10+ kernels are) or {_VM_FIX}",
    ),
}


def check_kernel(need_netem: bool) -> None:
    """Raise EnvironmentProblem for the first missing piece; return if all are there."""
    if not os.path.exists(BTF_PATH):
        raise EnvironmentProblem(*_MISSING["btf"])
    result: dict[str, object] = {}
    probe = threading.Thread(target=_probe_in_scratch_netns, args=(need_netem, result), daemon=True)
    probe.start()
    probe.join()
    if "error" in result:
        raise result["error"]  # type: ignore[misc]


def _probe_in_scratch_netns(need_netem: bool, result: dict[str, object]) -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.unshare(0x40000000) != 0:  # CLONE_NEWNET, this thread only
            err = ctypes.get_errno()
            if err == errno.EPERM:
                raise EnvironmentProblem(
                    "no privilege to create network namespaces and traffic control "
                    "(CAP_SYS_ADMIN and CAP_NET_ADMIN are needed)",
                    "run collapsar as root (e.g. with sudo)",
                )
            raise EnvironmentProblem(
                f"cannot create a scratch network namespace: {os.strerror(err)}",
                "check that this kernel has CONFIG_NET_NS",
            )
        _probe_all(need_netem)
    except CollapsarError as exc:
        result["error"] = exc


def _probe_all(need_netem: bool) -> None:
    from collapsar.tcal import nlmsg as m
    from collapsar.tcal.nlsock import RouteSocket
    from collapsar.tcal.plan import LeafParams

    sock = RouteSocket(None)  # this thread is in the scratch namespace
    root = 0x00010000

    def attempt(piece: str, requests: list[m.Request]) -> None:
        failures = sock.execute(requests)
        if failures:
            f = failures[0]
            if f.errno in (errno.ENOENT, errno.EOPNOTSUPP, errno.EINVAL):
                if piece == "netem":
                    raise netem_missing()
                raise EnvironmentProblem(*_MISSING[piece])
            if f.errno == errno.EPERM:
                raise EnvironmentProblem(
                    "no privilege for traffic control (CAP_NET_ADMIN is needed)",
                    "run collapsar as root (e.g. with sudo)",
                )
            raise EnvironmentProblem(f"probing {piece} failed: {f}", "report this as a Collapsar bug")

    try:
        if need_netem:
            attempt(
                "netem",
                [
                    m.Request(
                        m.RTM_NEWQDISC,
                        m.CREATE,
                        m.leaf_body(LOOPBACK_IFINDEX, root, m.TC_H_ROOT, LeafParams("netem", 1000, delay_us=1000)),
                        "probe netem",
                    )
                ],
            )
            attempt(
                "netem",
                [
                    m.Request(
                        m.RTM_DELQDISC, 0, m.qdisc_delete(LOOPBACK_IFINDEX, root, m.TC_H_ROOT), "remove netem probe"
                    )
                ],
            )
        attempt("htb", [m.Request(m.RTM_NEWQDISC, m.CREATE, m.htb_root(LOOPBACK_IFINDEX, root, 1), "probe htb")])
        attempt(
            "u32", [m.Request(m.RTM_NEWTFILTER, m.CREATE, m.u32_table(LOOPBACK_IFINDEX, root, 1, 256), "probe u32")]
        )
        attempt(
            "clsact",
            [
                m.Request(
                    m.RTM_NEWQDISC,
                    m.CREATE,
                    m.tcmsg(LOOPBACK_IFINDEX, CLSACT_HANDLE, TC_H_CLSACT) + m.kind("clsact"),
                    "probe clsact",
                )
            ],
        )
    finally:
        sock.close()
