"""Local mode's Meter for instances that come and go.

Local mode attaches the counters of a fixed set of namespaces once; here a
container may appear late, restart into a new namespace or go away, so each
one is attached when it is shaped and detached when it is not.  Rates,
windows and the status API's flow figures are Meter's own, unchanged.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import SimpleNamespace

from collapsar.errors import CollapsarError
from collapsar.manager.measure.throughput import CountersFactory, Meter


class ContainerMeter(Meter):
    def __init__(self, factory: CountersFactory | None, say: Callable[[str], None]):
        super().__init__(SimpleNamespace(instances=()), factory, say)
        self._warned = False
        self._wanted: dict[str, str] = {}  # instance -> the namespace it is shaped in now

    def address(self, ip_of: dict[str, str]) -> None:
        """Where destinations are: flows to unknown addresses are not counted."""
        with self._lock:
            self._instance_of = {ip: name for name, ip in ip_of.items()}

    def watch(self, instance: str, ifname: str, netns: str) -> None:
        """Attach on a thread: loading a BPF program takes ~0.1 s, and shaping
        the next container must not wait for it."""
        if self._factory is None:
            return
        with self._lock:
            self._wanted[instance] = netns
        threading.Thread(
            target=self._attach, args=(instance, ifname, netns), name=f"counters-{instance}", daemon=True
        ).start()

    def _attach(self, instance: str, ifname: str, netns: str) -> None:
        if self._factory is None:
            return
        try:
            counters = self._factory(ifname, netns).attach()
        except CollapsarError as error:
            if not self._warned:
                self._warned = True
                self._say(f"warning: no throughput measurements for {instance}: {error}")
            return
        with self._lock:
            if self._closing.is_set() or self._wanted.get(instance) != netns:
                # Forgotten (or closed) while attaching: an attached filter
                # must not outlive the namespace binding it was made for.
                _quiet_detach(counters)
                return
            old = self._counters.pop(instance, None)
            self._counters[instance] = counters
        if old is not None:
            _quiet_detach(old)

    def forget(self, instance: str) -> None:
        with self._lock:
            self._wanted.pop(instance, None)
            counters = self._counters.pop(instance, None)
        if counters is not None:
            _quiet_detach(counters)


def _quiet_detach(counters) -> None:
    try:
        counters.detach()
    except CollapsarError:
        pass  # its namespace is going, and the filter with it
