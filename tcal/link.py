"""The shaped interface's GSO limit (gso_max_segs), read and set over netlink.

Why the TCAL touches the interface at all is in `collapsar.tcal.plan` (GSO):
in short, super-packets make a slow path deliver in 64 KB lumps, and only the
device's gso_max_segs keeps TCP from building them.  `GsoLimit` lowers it
when the plan asks and puts the original value back at teardown.
"""

from __future__ import annotations

import struct

from collapsar.errors import KernelError

from .nlmsg import Request, attr, parse_attrs
from .nlsock import RouteSocket

RTM_NEWLINK, RTM_GETLINK = 16, 18
IFLA_GSO_MAX_SEGS = 40
_IFINFO = struct.Struct("=BxHiII")  # family, pad, type, index, flags, change


def _ifinfo(ifindex: int) -> bytes:
    return _IFINFO.pack(0, 0, ifindex, 0, 0)


class GsoLimit:
    def __init__(self, sock: RouteSocket, ifindex: int, ifname: str):
        self.sock, self.ifindex, self.ifname = sock, ifindex, ifname
        self.original: int | None = None  # set once we have changed it

    def read(self) -> int:
        body = self.sock.ask(RTM_GETLINK, _ifinfo(self.ifindex), f"read gso_max_segs of {self.ifname}")
        value = parse_attrs(body, _IFINFO.size).get(IFLA_GSO_MAX_SEGS)
        if value is None:
            raise KernelError(f"{self.ifname}: the kernel reports no gso_max_segs")
        return struct.unpack("=I", value)[0]

    def lower_to(self, segs: int) -> None:
        """Set gso_max_segs to `segs` if that is below the current value."""
        current = self.read()
        if segs >= current:
            return
        self._set(segs, f"lower gso_max_segs of {self.ifname} from {current} to {segs}")
        if self.original is None:  # a second lowering must not forget the first value
            self.original = current

    def restore(self) -> None:
        if self.original is not None:
            self._set(self.original, f"restore gso_max_segs of {self.ifname} to {self.original}")
            self.original = None

    def _set(self, segs: int, what: str) -> None:
        body = _ifinfo(self.ifindex) + attr(IFLA_GSO_MAX_SEGS, struct.pack("=I", segs))
        failures = self.sock.execute([Request(RTM_NEWLINK, 0, body, what)])
        if failures:
            raise KernelError(f"{self.ifname}: {failures[0]}")
