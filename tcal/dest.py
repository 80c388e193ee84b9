"""What a TcTree knows of one destination: its record, its class, leaf and
filter node, and what the kernel holds for it; and how a change is undone.

A tree takes a destination's new state when it makes the requests (so that
later calls of the same prepared step build on it) and puts the state back
when the kernel refuses them: `saved` and `put_back_all` are that undo.
"""

from __future__ import annotations

from dataclasses import dataclass

from collapsar.tcal import nlmsg as m
from collapsar.tcal.layout import ROOT_MAJOR, U32Slot, classid, format_handle
from collapsar.tcal.plan import LeafParams, Shaping

Saved = tuple[Shaping, LeafParams, int | None, str | None]


@dataclass
class Dest:
    shaping: Shaping
    minor: int
    leaf: LeafParams
    slot: U32Slot
    template: m.ClassTemplate
    table_sent: str | None  # distribution whose table the kernel holds for this leaf
    cut: bool = False
    sized_for_bps: int | None = 0  # the rate the leaf's limit was sized for (None: unlimited)
    change_what: str = ""  # made once: error text of this destination's class changes

    def __post_init__(self) -> None:
        self.sized_for_bps = self.shaping.rate_bps
        self.change_what = f"destination {self.shaping.dst_ip}: change class {format_handle(self.classid)}"

    @property
    def classid(self) -> int:
        return classid(ROOT_MAJOR, self.minor)

    def limit_rate(self, new: Shaping) -> int | None:
        """The rate the leaf's queue must hold for `new`: the highest the path
        has had (None: unlimited)."""
        if new.rate_bps is None or self.sized_for_bps is None:
            return None
        return max(new.rate_bps, self.sized_for_bps)


def saved(dest: Dest) -> Saved:
    """What a change may alter in a destination (see put_back_all)."""
    return dest.shaping, dest.leaf, dest.sized_for_bps, dest.table_sent


def put_back_all(undo: list[tuple[Dest, Saved]], only: set[str | None] | None) -> None:
    """Undo in reverse, so a destination changed twice ends at its first state;
    `only`: the addresses to undo (None: all)."""
    for dest, state in reversed(undo):
        if only is None or dest.shaping.dst_ip in only:
            dest.shaping, dest.leaf, dest.sized_for_bps, dest.table_sent = state


def unchecked(shaping: Shaping, **values: object) -> Shaping:
    """`shaping` with some fields replaced by values already checked (a rate
    check_rate passed, an address the tree holds), without validating the
    record again: the sharing loop's hundreds of rate changes per period, a
    link change's thousands of moved destinations."""
    new = object.__new__(Shaping)
    new.__dict__.update(shaping.__dict__)  # frozen: fill the copy's dict directly
    new.__dict__.update(values)
    return new
