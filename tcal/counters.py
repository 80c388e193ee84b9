"""Per-destination egress counters: Python side of tcal/bpf (libcxcounters.so).

An eBPF program at clsact egress of one interface counts, per destination IPv4
address, what the instance sends: `bytes` (sum of skb lengths, layer 2
included), `packets` (wire packets: a GSO super-packet counts its segments) and
`wire_bytes` (what an Ethernet link carries for them: headers repeated per
segment, short frames padded to 60 bytes, plus 24 bytes of preamble, frame
check and inter-frame gap per packet).  Traffic is counted as offered at
egress, before the htb/netem tree can delay or drop it.  Non-IPv4 traffic
(ARP, IPv6) goes to one separate slot, `read_other()`.

Limits, by design: the map is an LRU hash of `max_destinations` entries, so
past that an idle destination is evicted (and restarts from zero if it comes
back) rather than new ones going uncounted; the program assumes an Ethernet
header (veth, bridge ports, physical NICs); one Counters is used from one
thread at a time (it owns its read buffers).

Reading goes through libbpf in-process (ctypes; no process per read).  The
shared library is built by `make -C tcal` (see `build_counters`), never
implicitly at import: a setup step builds, the running system only loads.
"""

from __future__ import annotations

import ctypes
import errno
import pathlib
import socket
import subprocess
from typing import NamedTuple

import numpy as np

from collapsar.errors import EnvironmentProblem, KernelError
from collapsar.tcal.built import TCAL_DIR, load_built

LIBRARY_PATH = TCAL_DIR / "build" / "libcxcounters.so"
# Also the duplicator's (collapsar.tcal.duplicate) and the guard's program
# (collapsar.tcal.guard): one library holds the loaders.
LIBRARY_SOURCES = (
    "bpf/counters.bpf.c",
    "bpf/counters.h",
    "bpf/loader.c",
    "bpf/loader.h",
    "bpf/reader.c",
    "bpf/tchook.c",
    "bpf/internal.h",
    "bpf/duplicate.bpf.c",
    "bpf/duplicate.h",
    "bpf/duplicator.c",
    "bpf/duplicator.h",
    "bpf/guard.c",
    "bpf/guard.h",
    "Makefile",
)
BTF_PATH = pathlib.Path("/sys/kernel/btf/vmlinux")

# Preamble+SFD 8 + FCS 4 + inter-frame gap 12, as in counters.h.
ETHERNET_OVERHEAD_BYTES = 24
# The batch read walks every hash bucket: keep the map near the real need.
DEFAULT_MAX_DESTINATIONS = 4096

# enum cx_stage in loader.h
_STAGE_NETNS, _STAGE_IFACE, _STAGE_LOAD = 1, 2, 3

# struct cx_entry in counters.h, for the array form of a read.
ENTRY_DTYPE = np.dtype(
    [("daddr_be", "<u4"), ("pad", "<u4"), ("bytes", "<u8"), ("packets", "<u8"), ("wire_bytes", "<u8")]
)


class DestCounter(NamedTuple):
    """Totals since attach for one destination (or the non-IPv4 slot)."""

    bytes: int
    packets: int
    wire_bytes: int


class _Value(ctypes.Structure):
    _fields_ = [("bytes", ctypes.c_uint64), ("packets", ctypes.c_uint64), ("wire_bytes", ctypes.c_uint64)]


def build_counters(make: str = "make") -> pathlib.Path:
    """Build libcxcounters.so (the setup script's step); returns its path."""
    proc = subprocess.run([make, "-C", str(TCAL_DIR)], capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise EnvironmentProblem(
            f"building the eBPF counters failed: {tail[0]}",
            "install the packages in deps/apt-tcal-bpf.txt and run `make -C tcal`",
        )
    return LIBRARY_PATH


_lib: ctypes.CDLL | None = None


def load_library() -> ctypes.CDLL:
    """Load libcxcounters.so now (a missing or out-of-date build is an error)."""
    return _library()


def _library() -> ctypes.CDLL:
    """Load libcxcounters.so once; refuse a missing or out-of-date build."""
    global _lib
    if _lib is not None:
        return _lib
    lib = load_built(LIBRARY_PATH, LIBRARY_SOURCES, "eBPF counters")
    u32p = ctypes.POINTER(ctypes.c_uint32)
    lib.cx_counters_attach.restype = ctypes.c_void_p
    lib.cx_counters_attach.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint32, ctypes.c_uint32]
    lib.cx_counters_read.restype = ctypes.c_int
    lib.cx_counters_read.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint32]
    lib.cx_counters_read_other.argtypes = [ctypes.c_void_p, ctypes.POINTER(_Value)]
    lib.cx_counters_detach.argtypes = [ctypes.c_void_p]
    lib.cx_counters_free.restype = None
    lib.cx_counters_free.argtypes = [ctypes.c_void_p]
    lib.cx_counters_filter.argtypes = [ctypes.c_void_p, u32p, u32p, u32p]
    lib.cx_counters_use_batch.restype = None
    lib.cx_counters_use_batch.argtypes = [ctypes.c_void_p, ctypes.c_bool]
    lib.cx_last_error.restype = ctypes.c_char_p
    lib.cx_last_error.argtypes = []
    _lib = lib
    return lib


def need_btf(what: str) -> None:
    """Refuse a kernel without BTF: the CO-RE programs cannot load there."""
    if not BTF_PATH.exists():
        raise EnvironmentProblem(
            f"kernel has no BTF ({BTF_PATH} is missing), {what} cannot load",
            "use a kernel built with CONFIG_DEBUG_INFO_BTF=y (or run with --vm)",
        )


def library_error(lib: ctypes.CDLL, what: str, ifname: str, netns: str | None, action: str) -> Exception:
    """The library's last error (loader.h: message, errno, stage) as the
    exception that names the fix; `what` names the program ("eBPF counters")."""
    where = f"{ifname} in netns {netns}" if netns else ifname
    msg = (lib.cx_last_error() or b"").decode(errors="replace")
    err, stage = lib.cx_last_errno(), lib.cx_last_stage()
    # EACCES while loading is the verifier's refusal, not a missing privilege.
    if err == errno.EPERM or (err == errno.EACCES and stage != _STAGE_LOAD):
        return EnvironmentProblem(
            f"{what} on {where}: {action} refused ({msg})", "needs CAP_BPF and CAP_NET_ADMIN: run as root"
        )
    if stage == _STAGE_NETNS and err == errno.ENOENT:
        return EnvironmentProblem(
            f"network namespace {netns!r} not found ({msg})",
            f"create it (`ip netns add {netns}`) or pass an existing one",
        )
    if stage == _STAGE_IFACE:
        return EnvironmentProblem(
            f"no interface {ifname!r} in netns {netns or '(own)'}",
            "pass the instance's egress interface (see `ip link`)",
        )
    if stage == _STAGE_LOAD:
        return KernelError(
            f"{what} on {where}: the kernel refused the program ({msg}); set COLLAPSAR_BPF_DEBUG=1 for the verifier log"
        )
    return KernelError(f"{what} on {where}: {action} failed: {msg}")


class Counters:
    """Egress counters on `ifname` inside network namespace `netns`.

    `netns` is a name under /var/run/netns (as `ip netns` makes), an absolute
    path to a namespace file, or None for the caller's own namespace.
    attach() and detach() are idempotent; the context manager does both.
    """

    def __init__(
        self,
        ifname: str,
        netns: str | None = None,
        max_destinations: int = DEFAULT_MAX_DESTINATIONS,
        wire_overhead_bytes: int = ETHERNET_OVERHEAD_BYTES,
    ):
        if not 0 < max_destinations < 2**31:
            raise ValueError(f"max_destinations must be positive, got {max_destinations}")
        if not 0 <= wire_overhead_bytes < 2**16:
            raise ValueError(f"wire_overhead_bytes must be 0..65535, got {wire_overhead_bytes}")
        self.ifname = ifname
        self.netns = netns
        self.max_destinations = max_destinations
        self.wire_overhead_bytes = wire_overhead_bytes
        self._handle: int | None = None
        self._buf = np.zeros(0, dtype=ENTRY_DTYPE)
        self._buf_addr = 0  # the buffer's address, taken once: `.ctypes.data` costs microseconds per read
        self._names: dict[int, str] = {}

    @property
    def where(self) -> str:
        return f"{self.ifname} in netns {self.netns}" if self.netns else self.ifname

    @property
    def attached(self) -> bool:
        return self._handle is not None

    def attach(self) -> Counters:
        """Load the program and attach it; a second call does nothing."""
        if self._handle is not None:
            return self
        lib = _library()
        need_btf("eBPF counters")
        ns = self.netns.encode() if self.netns else None
        handle = lib.cx_counters_attach(self.ifname.encode(), ns, self.max_destinations, self.wire_overhead_bytes)
        if not handle:
            raise self._error(lib, "attach")
        self._handle = handle
        self._buf = np.zeros(self.max_destinations, dtype=ENTRY_DTYPE)
        self._buf_addr = self._buf.ctypes.data
        return self

    def detach(self) -> None:
        """Remove our filter (and the clsact if we created it); idempotent."""
        if self._handle is None:
            return
        lib = _library()
        if lib.cx_counters_detach(self._handle) != 0:
            raise self._error(lib, "detach")
        lib.cx_counters_free(self._handle)
        self._handle = None

    def read_array(self) -> np.ndarray:
        """Every destination as a structured array (ENTRY_DTYPE), a fresh copy:
        the form for the sharing loop, without a Python object per entry."""
        handle = self._need_handle()
        lib = _library()
        n = lib.cx_counters_read(handle, self._buf_addr, len(self._buf))
        if n < 0:
            raise self._error(lib, "read")
        return self._buf[:n].copy()

    def read(self) -> dict[str, DestCounter]:
        """Every destination's totals since attach, keyed by dotted address."""
        rows = self.read_array()
        names = self._names
        keys = rows["daddr_be"].tolist()
        for key in keys:
            if key not in names:
                # The key holds the address bytes in network order.
                names[key] = socket.inet_ntoa(key.to_bytes(4, "little"))
        # _make is tuple.__new__ in C: a third of the cost of DestCounter(...).
        values = map(
            DestCounter._make, zip(rows["bytes"].tolist(), rows["packets"].tolist(), rows["wire_bytes"].tolist())
        )
        return dict(zip(map(names.__getitem__, keys), values))

    def read_other(self) -> DestCounter:
        """Totals of non-IPv4 traffic (ARP, IPv6), kept apart from destinations."""
        handle = self._need_handle()
        lib = _library()
        value = _Value()
        if lib.cx_counters_read_other(handle, ctypes.byref(value)) != 0:
            raise self._error(lib, "read")
        return DestCounter(value.bytes, value.packets, value.wire_bytes)

    def filter_id(self) -> tuple[int, int, int]:
        """(tc handle, tc priority, BPF program id) of our filter."""
        handle = self._need_handle()
        h, prio, prog = ctypes.c_uint32(), ctypes.c_uint32(), ctypes.c_uint32()
        lib = _library()
        if lib.cx_counters_filter(handle, ctypes.byref(h), ctypes.byref(prio), ctypes.byref(prog)) != 0:
            raise self._error(lib, "filter_id")
        return h.value, prio.value, prog.value

    def use_batch(self, enabled: bool) -> None:
        """Read with one batch syscall (default) or key by key (the fallback)."""
        _library().cx_counters_use_batch(self._need_handle(), enabled)

    def _need_handle(self) -> int:
        if self._handle is None:
            raise KernelError(f"eBPF counters on {self.where}: not attached (call attach() first)")
        return self._handle

    def _error(self, lib: ctypes.CDLL, action: str) -> Exception:
        return library_error(lib, "eBPF counters", self.ifname, self.netns, action)

    def __enter__(self) -> Counters:
        return self.attach()

    def __exit__(self, *exc) -> None:
        self.detach()

    def __del__(self):
        # Last resort so a forgotten Counters does not leave a filter behind.
        if getattr(self, "_handle", None) is not None and _lib is not None:
            _lib.cx_counters_free(self._handle)
            self._handle = None
