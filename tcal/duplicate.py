"""Per-destination packet duplication: Python side of tcal/bpf/duplicate.bpf.c.

netem's `duplicate` cannot serve a Collapsar tree: a netem that duplicates
refuses to share a tree with any other netem ("netem: cannot mix duplicating
netems with other netems in tree", kernel 6.1 and later), and every tree has
a netem per destination plus the blackhole's.  So an eBPF program at clsact
egress does it, with netem's semantics: per packet to a destination with
probability d, one copy, which then takes the same way through the tree as
the original (its own loss draw, delay and rate), enqueued just before it,
and is never copied again.  Non-IPv4 traffic is never copied.  A GSO
super-packet is copied whole, as netem copies it.  The eBPF counters do not
count copies (tcal/bpf/duplicate.h has the mark that tells them apart).

A `Duplicator` attaches on the first destination given a probability above
0, so a tree without duplication has no program at all; once attached it
stays until `detach` (a destination set back to 0 leaves the map, which
costs a packet one hash lookup).  Setting a probability is one map update
(a few microseconds), cheap enough for the sharing loop.  It lives in
libcxcounters.so (`make -C tcal`), with the counters.
"""

from __future__ import annotations

import ctypes
import math
import socket
import sys

from collapsar.errors import CollapsarError, KernelError
from collapsar.tcal.counters import DEFAULT_MAX_DESTINATIONS, library_error, load_library, need_btf

# tc priority of the duplicator's filter: behind the counters' (the kernel
# gives a filter added without a priority one below the lowest there, 49152
# on an empty clsact), which must see a copy still marked to leave it out.
DUPLICATOR_PRIORITY = 0xFFFF
PROBABILITY_ONE = 0xFFFF_FFFF  # netem's scale: a fraction of 2^32 - 1

_lib: ctypes.CDLL | None = None


def _library() -> ctypes.CDLL:
    global _lib
    if _lib is not None:
        return _lib
    lib = load_library()
    u32p = ctypes.POINTER(ctypes.c_uint32)
    lib.cx_dup_attach.restype = ctypes.c_void_p
    lib.cx_dup_attach.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint32, ctypes.c_uint32]
    lib.cx_dup_set.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint32]
    lib.cx_dup_detach.argtypes = [ctypes.c_void_p]
    lib.cx_dup_free.restype = None
    lib.cx_dup_free.argtypes = [ctypes.c_void_p]
    lib.cx_dup_filter.argtypes = [ctypes.c_void_p, u32p, u32p, u32p]
    _lib = lib
    return lib


def probability(ratio: float) -> int:
    """`ratio` on netem's scale; a ratio above 0 is never 0 there (0 means none)."""
    return max(1, round(ratio * PROBABILITY_ONE)) if ratio > 0 else 0


def address_key(dst_ip: str) -> int:
    """The map's key for an address: its bytes in network order, as a u32 in host order."""
    try:
        packed = socket.inet_aton(dst_ip)
    except OSError:
        raise CollapsarError(f"destination {dst_ip!r}: expected an IPv4 address") from None
    return int.from_bytes(packed, sys.byteorder)


class Duplicator:
    """Duplication on `ifname` inside network namespace `netns` (as for
    collapsar.tcal.counters.Counters: a name under /var/run/netns, a path, or
    None for the caller's own)."""

    def __init__(self, ifname: str, netns: str | None = None, max_destinations: int = DEFAULT_MAX_DESTINATIONS):
        if not 0 < max_destinations < 2**31:
            raise ValueError(f"max_destinations must be positive, got {max_destinations}")
        self.ifname, self.netns, self.max_destinations = ifname, netns, max_destinations
        self._handle: int | None = None
        self._ratios: dict[str, float] = {}

    @property
    def attached(self) -> bool:
        return self._handle is not None

    @property
    def ratios(self) -> dict[str, float]:
        """Destination -> probability, for those above 0."""
        return dict(self._ratios)

    def ratio(self, dst_ip: str) -> float:
        """The probability in force for `dst_ip` (0: none)."""
        return self._ratios.get(dst_ip, 0.0)

    def check(self) -> None:
        """Refuse now what would stop the first `set` above 0 from attaching:
        a missing or stale build, a kernel without BTF."""
        _library()
        need_btf("the eBPF duplicator")

    def set(self, dst_ip: str, ratio: float) -> None:
        """Copy packets to `dst_ip` with probability `ratio` (0 stops it)."""
        if not (isinstance(ratio, (int, float)) and math.isfinite(ratio) and 0.0 <= ratio <= 1.0):
            raise CollapsarError(
                f"{self._where()}: destination {dst_ip}: duplicate ratio must lie in [0, 1], got {ratio!r}"
            )
        key = address_key(dst_ip)  # a bad address fails before anything changes
        if ratio and self._handle is None:
            self.attach()
        if self._handle is not None:
            lib = _library()
            if lib.cx_dup_set(self._handle, key, probability(ratio)) != 0:
                raise library_error(lib, "the eBPF duplicator", self.ifname, self.netns, f"destination {dst_ip}")
        if ratio:
            self._ratios[dst_ip] = ratio
        else:
            self._ratios.pop(dst_ip, None)

    def set_many(self, ratios: dict[str, float]) -> None:
        for dst_ip, ratio in ratios.items():
            self.set(dst_ip, ratio)

    def detach(self) -> None:
        """Remove our filter (and the clsact if we made it); idempotent."""
        self._ratios.clear()
        if self._handle is None:
            return
        lib = _library()
        if lib.cx_dup_detach(self._handle) != 0:
            raise library_error(lib, "the eBPF duplicator", self.ifname, self.netns, "detach")
        lib.cx_dup_free(self._handle)
        self._handle = None

    def filter_id(self) -> tuple[int, int, int]:
        """(tc handle, tc priority, BPF program id) of our filter."""
        if self._handle is None:
            raise KernelError(f"{self._where()}: not attached (no destination duplicates)")
        h, prio, prog = ctypes.c_uint32(), ctypes.c_uint32(), ctypes.c_uint32()
        lib = _library()
        if lib.cx_dup_filter(self._handle, ctypes.byref(h), ctypes.byref(prio), ctypes.byref(prog)) != 0:
            raise library_error(lib, "the eBPF duplicator", self.ifname, self.netns, "filter_id")
        return h.value, prio.value, prog.value

    def attach(self) -> None:
        """Load the program and attach it, with no destination yet (it copies
        nothing until `set`); a second call does nothing.  `set` attaches on
        its own; a caller that must put a ratio in force at an instant
        attaches ahead of it (loading and verifying takes ~20 ms)."""
        if self._handle is not None:
            return
        self.check()
        lib = _library()
        ns = self.netns.encode() if self.netns else None
        handle = lib.cx_dup_attach(self.ifname.encode(), ns, self.max_destinations, DUPLICATOR_PRIORITY)
        if not handle:
            raise library_error(lib, "the eBPF duplicator", self.ifname, self.netns, "attach")
        self._handle = handle

    def _where(self) -> str:
        return (
            f"eBPF duplicator on {self.ifname} in netns {self.netns}"
            if self.netns
            else f"eBPF duplicator on {self.ifname}"
        )

    def __del__(self):
        # Last resort so a forgotten Duplicator does not leave a filter behind.
        if getattr(self, "_handle", None) is not None and _lib is not None:
            _lib.cx_dup_free(self._handle)
            self._handle = None
