"""The shaped interface's GSO limit (gso_max_segs), read and set over netlink.

Why the TCAL touches the interface at all is in `collapsar.tcal.plan` (GSO):
in short, super-packets make a slow path deliver in 64 KB lumps, and only the
device's gso_max_segs keeps TCP from building them.  `GsoLimit` lowers it
when the plan asks and puts the original value back at teardown.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from collapsar.errors import KernelError
from collapsar.tcal.nlmsg import Request, attr, parse_attrs
from collapsar.tcal.nlsock import RouteSocket

RTM_NEWLINK, RTM_GETLINK = 16, 18
IFLA_GSO_MAX_SEGS = 40
_IFINFO = struct.Struct("=BxHiII")  # family, pad, type, index, flags, change


def _ifinfo(ifindex: int) -> bytes:
    return _IFINFO.pack(0, 0, ifindex, 0, 0)


class GsoLimit:
    def __init__(self, sock: RouteSocket, ifindex: int, ifname: str):
        self.sock, self.ifindex, self.ifname = sock, ifindex, ifname
        self.original: int | None = None  # set once we have changed it
        self._value: int | None = None  # what the interface holds, once read (nobody else changes it)

    def read(self) -> int:
        body = self.sock.ask(RTM_GETLINK, _ifinfo(self.ifindex), f"read gso_max_segs of {self.ifname}")
        value = parse_attrs(body, _IFINFO.size).get(IFLA_GSO_MAX_SEGS)
        if value is None:
            raise KernelError(f"{self.ifname}: the kernel reports no gso_max_segs")
        return struct.unpack("=I", value)[0]

    def lower_to(self, segs: int) -> None:
        """Set gso_max_segs to `segs` if that is below the current value."""
        current = self.read() if self._value is None else self._value
        self._value = current
        if segs >= current:
            return
        first = self.original is None  # a second lowering must not forget the first value
        if first:
            self.original = current
        self._set(
            segs,
            f"lower gso_max_segs of {self.ifname} from {current} to {segs}",
            undo=(lambda: setattr(self, "original", None)) if first else None,
        )

    def restore(self) -> None:
        if self.original is not None:
            original = self.original
            self.original = None
            self._set(
                original,
                f"restore gso_max_segs of {self.ifname} to {original}",
                undo=lambda: setattr(self, "original", original),
            )

    def _set(self, segs: int, what: str, undo: Callable[[], None] | None) -> None:
        """Sent now, or at the instant of the step being prepared (nlsock.submit):
        the new value counts from now; `undo` runs if the kernel refuses."""
        previous = self._value
        self._value = segs
        body = _ifinfo(self.ifindex) + attr(IFLA_GSO_MAX_SEGS, struct.pack("=I", segs))

        def then(failures) -> None:
            if failures:
                self._value = previous
                if undo is not None:
                    undo()
                raise KernelError(f"{self.ifname}: {failures[0]}")

        self.sock.submit([Request(RTM_NEWLINK, 0, body, what)], then)
