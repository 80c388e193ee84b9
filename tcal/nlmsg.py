"""Netlink traffic-control messages, packed by hand.

Why not pyroute2 here: it encodes htb rate tables in Python and takes ~1.1 ms
per class change on these hosts, against a budget of 50 us (1000 changes per
50 ms sharing period).  The messages the TCAL needs are few and fixed, so each
is a struct layout from the kernel's uapi headers (linux/pkt_sched.h,
linux/pkt_cls.h, linux/rtnetlink.h).  A `Request` is a message body without
its nlmsghdr; `nlsock.RouteSocket` adds the header and sequence number.

Kernel facts these encoders rely on (checked against net/sched/*.c):
- htb classes with tc_ratespec.linklayer = ethernet need no rate table
  (qdisc_get_rtab is only called for TC_LINKLAYER_UNAWARE), so a class change
  is ~100 bytes; rates of 2^32 bytes/s and above go in TCA_HTB_RATE64/CEIL64,
  the kernel takes the larger of the two fields.
- netem's TCA_OPTIONS is a struct tc_netem_qopt followed by attributes (not a
  proper nest).  A netem change resets every qopt field, so every change sends
  delay, jitter, loss and limit; the distribution table is kept by the kernel
  when a change carries none, so it is sent only when it changes.  The
  reorder, corrupt and rate attributes are also kept when absent, so every
  change sends them (zero when unused); a change without TCA_NETEM_LOSS
  falls back to Bernoulli loss, so the Gilbert-Elliott model goes with every
  change that has one.  Reordering needs gap >= 1 (gap 0 never reorders).
- u32 nodes: tcm_handle picks the node, TCA_U32_HASH the table and bucket.
"""

from __future__ import annotations

import socket
import struct
from typing import NamedTuple

from collapsar.tcal.dist import table_bytes
from collapsar.tcal.layout import U32Slot
from collapsar.tcal.plan import IN_ORDER_RATE_BPS, PSCHED_TICK_NS, TC_LINKLAYER_ETHERNET, HtbParams, LeafParams

RTM_NEWQDISC, RTM_DELQDISC, RTM_GETQDISC = 36, 37, 38
RTM_NEWTCLASS, RTM_DELTCLASS, RTM_GETTCLASS = 40, 41, 42
RTM_NEWTFILTER, RTM_DELTFILTER, RTM_GETTFILTER = 44, 45, 46
NLM_F_REQUEST, NLM_F_ACK = 0x1, 0x4
NLM_F_EXCL, NLM_F_CREATE = 0x200, 0x400
CREATE = NLM_F_CREATE | NLM_F_EXCL  # create, never silently take over someone else's object
CHANGE = 0  # in place: no CREATE, no EXCL, no REPLACE

TC_H_ROOT = 0xFFFFFFFF
TCA_KIND, TCA_OPTIONS = 1, 2
TCA_STATS2, TCA_STATS_BASIC = 7, 1  # a qdisc's counters: struct gnet_stats_basic (u64 bytes, u32 packets)
TCA_HTB_PARMS, TCA_HTB_INIT, TCA_HTB_RATE64, TCA_HTB_CEIL64 = 1, 2, 6, 7
HTB_VERSION = 3
HTB_RATE2QUANTUM = 10
TCA_NETEM_DELAY_DIST, TCA_NETEM_REORDER, TCA_NETEM_CORRUPT, TCA_NETEM_LOSS = 2, 3, 4, 5
TCA_NETEM_RATE, TCA_NETEM_RATE64, TCA_NETEM_LATENCY64, TCA_NETEM_JITTER64 = 6, 8, 10, 11
NETEM_LOSS_GE = 2  # struct tc_netem_gemodel, inside TCA_NETEM_LOSS
TCA_U32_CLASSID, TCA_U32_HASH, TCA_U32_LINK, TCA_U32_DIVISOR, TCA_U32_SEL = 1, 2, 3, 4, 5
TC_U32_TERMINAL = 1
ETH_P_IP = 0x0800
IPV4_DST_OFFSET = 16  # byte offset of the destination address in the IPv4 header
U32_FILTER_PRIO = 1

_TCMSG = struct.Struct("=BBHiIII")  # family, pad, pad, ifindex, handle, parent, info
_ATTR = struct.Struct("=HH")
_RATESPEC = "BBHhHI"  # cell_log, linklayer, overhead, cell_align, mpu, rate (bytes/s)
_HTB_OPT = struct.Struct("=" + _RATESPEC + _RATESPEC + "IIIII")  # + buffer, cbuffer, quantum, level, prio
_HTB_GLOB = struct.Struct("=IIIII")  # version, rate2quantum, defcls, debug, direct_pkts
_NETEM_QOPT = struct.Struct("=IIIIII")  # latency, limit, loss, gap, duplicate, jitter (ticks)
_NETEM_PROB_CORR = struct.Struct("=II")  # tc_netem_reorder, tc_netem_corrupt: probability, correlation
_NETEM_RATE = struct.Struct("=IiIi")  # rate (bytes/s), packet_overhead, cell_size, cell_overhead
_NETEM_GEMODEL = struct.Struct("=IIII")  # p, r, h (no loss in bad), k1 (loss in good)
_U32_SEL = struct.Struct("=BBBxHHhh4s")  # flags, offshift, nkeys, offmask, off, offoff, hoff, hmask(be)
_U32_KEY = struct.Struct("=4s4sii")  # mask(be), val(be), off, offmask
U32_MAX = 0xFFFFFFFF


class Request(NamedTuple):
    """One netlink request: type, flags (ACK is added by the socket), body, and
    what it does, for error messages ("10.0.1.2: change class 1:10")."""

    msg_type: int
    flags: int
    body: bytes
    what: str
    key: str | None = None  # the destination it belongs to, if any


def attr(attr_type: int, payload: bytes) -> bytes:
    length = _ATTR.size + len(payload)
    return _ATTR.pack(length, attr_type) + payload + b"\0" * (-length & 3)


def u32_attr(attr_type: int, value: int) -> bytes:
    return attr(attr_type, struct.pack("=I", value))


def u64_attr(attr_type: int, value: int) -> bytes:
    return attr(attr_type, struct.pack("=Q", value))


def tcmsg(ifindex: int, handle: int, parent: int, info: int = 0) -> bytes:
    return _TCMSG.pack(socket.AF_UNSPEC, 0, 0, ifindex, handle, parent, info)


def kind(name: str) -> bytes:
    return attr(TCA_KIND, name.encode() + b"\0")


# --- htb -----------------------------------------------------------------


def htb_root(ifindex: int, handle: int, default_minor: int, parent: int = TC_H_ROOT) -> bytes:
    """The tree's htb: the interface's root, or the child of an egress bucket's tbf."""
    glob = _HTB_GLOB.pack(HTB_VERSION, HTB_RATE2QUANTUM, default_minor, 0, 0)
    return tcmsg(ifindex, handle, parent) + kind("htb") + attr(TCA_OPTIONS, attr(TCA_HTB_INIT, glob))


# The whole TCA_OPTIONS of a class change below 2^32 bytes/s, packed in one call:
# options header, parms header, tc_htb_opt.
_HTB_OPTIONS = struct.Struct("=HHHH" + _RATESPEC + _RATESPEC + "IIIII")


def htb_class_options(p: HtbParams) -> bytes:
    if p.rate_bytes_ps <= U32_MAX:
        spec = (0, TC_LINKLAYER_ETHERNET, p.overhead_bytes, 0, p.mpu_bytes, p.rate_bytes_ps)
        return _HTB_OPTIONS.pack(
            _HTB_OPTIONS.size,
            TCA_OPTIONS,
            4 + _HTB_OPT.size,
            TCA_HTB_PARMS,
            *spec,
            *spec,
            p.buffer_ticks,
            p.buffer_ticks,
            p.quantum_bytes,
            0,
            p.prio,
        )
    return htb_rate_ceil_options(p, p)


def htb_rate_ceil_options(rate: HtbParams, ceil: HtbParams) -> bytes:
    """A class whose rate and ceil differ (a traffic class under its
    destination's class: collapsar.tcal.classes); quantum and prio are the
    rate's.  Either above 2^32 - 1 bytes/s goes in its 64-bit attribute."""

    def spec(p: HtbParams) -> tuple[int, ...]:
        return (0, TC_LINKLAYER_ETHERNET, p.overhead_bytes, 0, p.mpu_bytes, min(p.rate_bytes_ps, U32_MAX))

    parms = _HTB_OPT.pack(
        *spec(rate), *spec(ceil), rate.buffer_ticks, ceil.buffer_ticks, rate.quantum_bytes, 0, rate.prio
    )
    attrs = attr(TCA_HTB_PARMS, parms)
    if rate.rate_bytes_ps > U32_MAX:
        attrs += u64_attr(TCA_HTB_RATE64, rate.rate_bytes_ps)
    if ceil.rate_bytes_ps > U32_MAX:
        attrs += u64_attr(TCA_HTB_CEIL64, ceil.rate_bytes_ps)
    return attr(TCA_OPTIONS, attrs)


class ClassTemplate:
    """A destination's class message with everything but the htb options
    packed once: the sharing loop's rate changes only pack the options."""

    __slots__ = ("prefix",)

    def __init__(self, ifindex: int, classid: int, parent: int):
        self.prefix = tcmsg(ifindex, classid, parent) + kind("htb")

    def body(self, p: HtbParams) -> bytes:
        return self.prefix + htb_class_options(p)


# --- leaves --------------------------------------------------------------


def _ticks(time_us: int) -> int:
    return min(time_us * 1000 // PSCHED_TICK_NS, U32_MAX)


def _prob(ratio: float) -> int:
    """A probability as netem holds it: a fraction of 2^32 - 1."""
    return round(ratio * U32_MAX)


def netem_options(p: LeafParams, with_table: bool) -> bytes:
    gap = 1 if p.reorder_ratio else 0
    # duplicate 0 always: a duplicating netem refuses to share a tree with
    # other netems; p.duplicate_ratio is put in force by collapsar.tcal.duplicate.
    qopt = _NETEM_QOPT.pack(_ticks(p.delay_us), p.limit_pkts, _prob(p.loss_ratio), gap, 0, _ticks(p.jitter_us))
    attrs = u64_attr(TCA_NETEM_LATENCY64, p.delay_us * 1000) + u64_attr(TCA_NETEM_JITTER64, p.jitter_us * 1000)
    if with_table:
        attrs += attr(TCA_NETEM_DELAY_DIST, table_bytes(p.distribution))
    attrs += attr(TCA_NETEM_REORDER, _NETEM_PROB_CORR.pack(_prob(p.reorder_ratio), 0))
    attrs += attr(TCA_NETEM_CORRUPT, _NETEM_PROB_CORR.pack(_prob(p.corrupt_ratio), 0))
    rate = IN_ORDER_RATE_BPS // 8 if p.in_order else 0
    attrs += attr(TCA_NETEM_RATE, _NETEM_RATE.pack(min(rate, U32_MAX), 0, 0, 0))
    if rate > U32_MAX:
        attrs += u64_attr(TCA_NETEM_RATE64, rate)
    model = p.loss_model
    if model is not None:
        gemodel = _NETEM_GEMODEL.pack(
            _prob(model.to_bad), _prob(model.to_good), _prob(1.0 - model.loss_in_bad), _prob(model.loss_in_good)
        )
        attrs += attr(TCA_NETEM_LOSS, attr(NETEM_LOSS_GE, gemodel))
    return attr(TCA_OPTIONS, qopt + attrs)


def leaf_body(ifindex: int, handle: int, parent: int, p: LeafParams, with_table: bool = True) -> bytes:
    head = tcmsg(ifindex, handle, parent) + kind(p.kind)
    if p.kind == "pfifo":
        return head + attr(TCA_OPTIONS, struct.pack("=I", p.limit_pkts))
    return head + netem_options(p, with_table)


def qdisc_delete(ifindex: int, handle: int, parent: int) -> bytes:
    return tcmsg(ifindex, handle, parent)


# --- u32 -----------------------------------------------------------------


def _filter_info(prio: int = U32_FILTER_PRIO) -> int:
    """A filter's priority and protocol (IPv4) as tcm_info holds them."""
    return (prio << 16) | socket.htons(ETH_P_IP)


def _selector(keys: list[tuple[int, int, int]], flags: int = 0, hmask: int = 0, hoff: int = 0) -> bytes:
    """keys: (mask, value, offset) on the IPv4 header, big-endian values."""
    sel = _U32_SEL.pack(flags, 0, len(keys), 0, 0, 0, hoff, struct.pack(">I", hmask))
    for mask, value, off in keys:
        sel += _U32_KEY.pack(struct.pack(">I", mask), struct.pack(">I", value), off, 0)
    return sel


def _filter_head(ifindex: int, handle: int, parent: int) -> bytes:
    return tcmsg(ifindex, handle, parent, _filter_info()) + kind("u32")


def u32_table(ifindex: int, parent: int, htid: int, divisor: int) -> bytes:
    return _filter_head(ifindex, htid << 20, parent) + attr(TCA_OPTIONS, u32_attr(TCA_U32_DIVISOR, divisor))


def u32_link(
    ifindex: int, parent: int, handle: int, bucket_address: int | None, link_htid: int, hash_mask: int
) -> bytes:
    """A match-all node that hashes the destination address with `hash_mask`
    and continues in table `link_htid`; bucket_address None = the root table."""
    opts = u32_attr(TCA_U32_LINK, link_htid << 20)
    opts += attr(TCA_U32_SEL, _selector([(0, 0, 0)], hmask=hash_mask, hoff=IPV4_DST_OFFSET))
    if bucket_address is not None:
        opts += u32_attr(TCA_U32_HASH, bucket_address)
    return _filter_head(ifindex, handle, parent) + attr(TCA_OPTIONS, opts)


def u32_match(ifindex: int, parent: int, slot: U32Slot, dst_ip: str, target_classid: int, create: bool) -> bytes:
    """The node for one destination: full destination address -> class.  A change
    (create False) only resends the class: the kernel keeps the selector."""
    opts = u32_attr(TCA_U32_CLASSID, target_classid)
    if create:
        ip = struct.unpack(">I", socket.inet_aton(dst_ip))[0]
        opts += attr(TCA_U32_SEL, _selector([(U32_MAX, ip, IPV4_DST_OFFSET)], flags=TC_U32_TERMINAL))
        opts += u32_attr(TCA_U32_HASH, (slot.level2_htid << 20) | (slot.level2_bucket << 12))
    return _filter_head(ifindex, slot.handle, parent) + attr(TCA_OPTIONS, opts)


def u32_catch_all(ifindex: int, parent: int, handle: int, target_classid: int) -> bytes:
    """A node matching every IPv4 packet that reaches it -> class."""
    opts = u32_attr(TCA_U32_CLASSID, target_classid)
    opts += attr(TCA_U32_SEL, _selector([(0, 0, 0)], flags=TC_U32_TERMINAL))
    return _filter_head(ifindex, handle, parent) + attr(TCA_OPTIONS, opts)


def u32_delete(ifindex: int, parent: int, handle: int) -> bytes:
    return _filter_head(ifindex, handle, parent)


def u32_rule(ifindex: int, parent: int, handle: int, keys: list[tuple[int, int, int]], target_classid: int) -> bytes:
    """A node in the root table of `parent`'s filters: every key (mask,
    value, offset in the IPv4 header) fits -> class."""
    opts = u32_attr(TCA_U32_CLASSID, target_classid)
    opts += attr(TCA_U32_SEL, _selector(keys, flags=TC_U32_TERMINAL))
    return _filter_head(ifindex, handle, parent) + attr(TCA_OPTIONS, opts)


def filters_flush(ifindex: int, parent: int) -> bytes:
    """Every filter attached to `parent` (a class), deleted: priority,
    protocol, handle and kind all unset."""
    return tcmsg(ifindex, 0, parent)


# --- clsact and cls_bpf (collapsar.tcal.guard) --------------------------------

TC_H_CLSACT = 0xFFFFFFF1  # the clsact qdisc's parent (TC_H_INGRESS's value)
CLSACT_HANDLE = 0xFFFF0000
CLSACT_EGRESS = 0xFFFFFFF3  # TC_H_MAKE(TC_H_CLSACT, TC_H_MIN_EGRESS)
TCA_BPF_FD, TCA_BPF_NAME, TCA_BPF_FLAGS = 6, 7, 8
TCA_BPF_FLAG_ACT_DIRECT = 1


def clsact(ifindex: int) -> bytes:
    return tcmsg(ifindex, CLSACT_HANDLE, TC_H_CLSACT) + kind("clsact")


def bpf_filter(ifindex: int, parent: int, prio: int, handle: int, prog_fd: int, name: str) -> bytes:
    """A direct-action cls_bpf filter for IPv4 packets: the program's return
    value is the verdict."""
    opts = u32_attr(TCA_BPF_FD, prog_fd) + attr(TCA_BPF_NAME, name.encode() + b"\0")
    opts += u32_attr(TCA_BPF_FLAGS, TCA_BPF_FLAG_ACT_DIRECT)
    head = tcmsg(ifindex, handle, parent, _filter_info(prio))
    return head + kind("bpf") + attr(TCA_OPTIONS, opts)


def filter_prio_delete(ifindex: int, parent: int, prio: int) -> bytes:
    """Every IPv4 filter of one priority under `parent`, deleted."""
    return tcmsg(ifindex, 0, parent, _filter_info(prio))


# --- parsing (error replies, tests) -----------------------------------------


def parse_attrs(data: bytes, offset: int = 0) -> dict[int, bytes]:
    out: dict[int, bytes] = {}
    while offset + _ATTR.size <= len(data):
        length, attr_type = _ATTR.unpack_from(data, offset)
        if length < _ATTR.size:
            break
        out[attr_type & 0x3FFF] = data[offset + _ATTR.size : offset + length]
        offset += (length + 3) & ~3
    return out


def sent_bytes(body: bytes) -> int:
    """The bytes a qdisc has sent, from an RTM_NEWQDISC reply body."""
    basic = parse_attrs(parse_tcmsg(body)[3][TCA_STATS2])[TCA_STATS_BASIC]
    return struct.unpack_from("=Q", basic)[0]


def parse_tcmsg(body: bytes) -> tuple[int, int, int, dict[int, bytes]]:
    """(ifindex, handle, parent, attrs) of an RTM_NEWQDISC/NEWTCLASS reply body."""
    _, _, _, ifindex, handle, parent, _ = _TCMSG.unpack_from(body)
    return ifindex, handle, parent, parse_attrs(body, _TCMSG.size)
