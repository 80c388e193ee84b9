"""Which flows a sender may report: the collapsed paths from its own instance.

An authentic message (metadata.Codec verified its tag) comes from a manager
of the run, but a manager that lies, or has a bug, could still steer every
other manager's shaping by naming links its instance's traffic never
crosses.  So each flow a sender reports must be *the* collapsed path from
the sender's instance to some destination, one flow per destination, as the
receiver computes it itself from the same timeline.

Managers apply a timeline step at nearly, not exactly, the same moment (each
on its own clock), so a path counts if it is the one of the receiver's
current step or of the step just before or after it.  A path is computed
only when a flow names it, once per step in which the pair changed
(`Step.changed`): an event that changes few pairs costs few lookups.  A state
that is not a step of the timeline (the control API rebuilt it) is checked
on its own.
"""

from __future__ import annotations

from collections.abc import Sequence

from collapsar.errors import CollapsarError
from collapsar.manager.sharing.metadata import Message


class Routes:
    def __init__(self, timeline, instances: Sequence[str]):
        self.instances = tuple(instances)
        self._index = {name: i for i, name in enumerate(self.instances)}
        self._steps = timeline.steps
        self._step_of = {id(step.state): i for i, step in enumerate(self._steps)}
        # Link ends never change during a run (events change properties and presence).
        self._head = {lid: link.dst for lid, link in self._steps[0].state.links.items()}
        self._by_step: dict[tuple[int, str, str], tuple[int, ...] | None] = {}
        self._other: tuple[object, dict] = (None, {})  # a state outside the timeline, its paths

    def check(self, message: Message, state) -> str | None:
        """None when every flow of `message` is a path of its sender now, else
        the counter key of why not ("path")."""
        src = self.instances[message.sender_id]  # the codec checked the range
        lookups = self._lookups(state)
        seen: set[str] = set()
        for flow in message.flows:
            dst = self._head.get(flow.link_ids[-1])
            if dst is None or dst == src or dst not in self._index or dst in seen:
                return "path"
            seen.add(dst)
            if not any(lookup(src, dst) == flow.link_ids for lookup in lookups):
                return "path"
        return None

    def _lookups(self, state):
        step = self._step_of.get(id(state))
        if step is None or self._steps[step].state is not state:
            if self._other[0] is not state:
                self._other = (state, {})
            cache = self._other[1]

            def lookup(src: str, dst: str, cache=cache):
                if (src, dst) not in cache:
                    cache[(src, dst)] = _link_ids(state, src, dst)
                return cache[(src, dst)]

            return (lookup,)
        # The current step first: nearly every flow matches it.
        near = [i for i in (step, step - 1, step + 1) if 0 <= i < len(self._steps)]
        return tuple((lambda src, dst, i=i: self._at_step(i, src, dst)) for i in near)

    def _at_step(self, step: int, src: str, dst: str) -> tuple[int, ...] | None:
        # Back to the latest step at or before `step` that changed this pair.
        first = step
        while first > 0 and (src, dst) not in self._steps[first].changed:
            if (first, src, dst) in self._by_step:
                break
            first -= 1
        key = (first, src, dst)
        if key not in self._by_step:
            self._by_step[key] = _link_ids(self._steps[first].state, src, dst)
        self._by_step[(step, src, dst)] = self._by_step[key]
        return self._by_step[key]


def _link_ids(state, src: str, dst: str) -> tuple[int, ...] | None:
    try:
        path = state.path(src, dst)
    except CollapsarError:  # an instance this state does not know
        return None
    return None if path is None else tuple(path.link_ids)
