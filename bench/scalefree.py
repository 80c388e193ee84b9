"""Scale-free experiment files for the topology benchmark.

Shape (after the Kollaps paper's Table 4: two thirds services, one third
bridges):
- the bridges form the core, grown by preferential attachment: each new
  bridge links to two distinct existing bridges picked with probability
  proportional to their degree, so a few hubs appear as in real networks;
- services are hosts at the edge: each attaches to one bridge picked by the
  same preferential rule, and one in ten is dual-homed to a second bridge;
- 20 link events at 1s, 2s, ...: property changes (`set`), core links that
  leave, and joins (some rejoin a link that left, some create a new core link
  with its own properties).

Everything is drawn from `random.Random(seed)`: the same arguments give the
same text.  `generate` returns YAML text, so the benchmark times the parser.
"""

from __future__ import annotations

import argparse
import random

_KINDS = ("set", "leave", "join")


def _pick(rng: random.Random, weighted: list[str], avoid: set[str]) -> str:
    """A node drawn with probability proportional to its degree (`weighted`
    lists each node once per link end), not in `avoid`."""
    while True:
        choice = rng.choice(weighted)
        if choice not in avoid:
            return choice


def _link(rng: random.Random, a: str, b: str, core: bool) -> str:
    latency_us = rng.randint(200, 5000) if core else rng.randint(50, 1000)
    rate = rng.choice((100, 1000, 10000) if core else (10, 100, 1000))
    # The parser rejects jitter above the latency (delays would clip at zero).
    jitter = f", jitter: {latency_us // rng.randint(2, 10)}us" if rng.random() < 0.2 else ""
    loss = f", loss: {rng.randint(1, 10) / 100}%" if rng.random() < 0.1 else ""
    return f"  - {{from: {a}, to: {b}, latency: {latency_us}us{jitter}{loss}, bandwidth: {rate}Mbps}}"


def generate(elements: int, seed: int = 1, events: int = 20) -> str:
    """YAML text of a scale-free experiment with `elements` services + bridges."""
    if elements < 9:
        raise ValueError(f"need at least 9 elements, got {elements}")
    rng = random.Random(seed)
    bridge_count = elements // 3
    bridges = [f"b{i}" for i in range(bridge_count)]
    services = [f"s{i}" for i in range(elements - bridge_count)]
    core: list[tuple[str, str]] = [(bridges[0], bridges[1]), (bridges[1], bridges[2]), (bridges[0], bridges[2])]
    weighted = [end for pair in core for end in pair]
    for bridge in bridges[3:]:
        first = _pick(rng, weighted, set())
        second = _pick(rng, weighted, {first})
        for other in (first, second):
            core.append((other, bridge))
            weighted += [other, bridge]
    lines = [f"experiment: {{name: scalefree-{elements}, seed: {seed}}}", "services:"]
    lines += [f"  {name}: {{command: [sleep, infinity]}}" for name in services]
    lines.append("bridges: [" + ", ".join(bridges) + "]")
    lines.append("links:")
    lines += [_link(rng, a, b, True) for a, b in core]
    for service in services:
        home = _pick(rng, weighted, set())
        lines.append(_link(rng, service, home, False))
        if rng.random() < 0.1:
            lines.append(_link(rng, service, _pick(rng, weighted, {home}), False))
    lines.append("events:")
    lines += _events(rng, core, bridges, events)
    return "\n".join(lines) + "\n"


def _events(rng: random.Random, core: list[tuple[str, str]], bridges: list[str], count: int) -> list[str]:
    present = list(core)
    linked = {frozenset(pair) for pair in core}
    gone: list[tuple[str, str]] = []
    lines = []
    for second in range(1, count + 1):
        kind = _KINDS[(second - 1) % 3]
        if kind == "set":
            a, b = rng.choice(present)
            lines.append(
                f"  - {{at: {second}s, link: [{a}, {b}], set: "
                f"{{latency: {rng.randint(200, 8000)}us, "
                f"bandwidth: {rng.choice((50, 500, 5000))}Mbps}}}}"
            )
        elif kind == "leave":
            pair = present.pop(rng.randrange(len(present)))
            gone.append(pair)
            lines.append(f"  - {{at: {second}s, link: [{pair[0]}, {pair[1]}], action: leave}}")
        elif gone and rng.random() < 0.5:
            pair = gone.pop(rng.randrange(len(gone)))
            present.append(pair)
            lines.append(f"  - {{at: {second}s, link: [{pair[0]}, {pair[1]}], action: join}}")
        else:
            while True:
                a, b = rng.sample(bridges, 2)
                if frozenset((a, b)) not in linked:
                    break
            linked.add(frozenset((a, b)))
            present.append((a, b))
            lines.append(
                f"  - {{at: {second}s, link: [{a}, {b}], action: join, "
                f"latency: {rng.randint(200, 5000)}us, bandwidth: 1Gbps}}"
            )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description="Print a scale-free experiment as YAML")
    parser.add_argument("elements", type=int, help="services + bridges")
    parser.add_argument("--seed", type=int, default=1, help="random seed")
    parser.add_argument("--events", type=int, default=20, help="link events")
    args = parser.parse_args()
    print(generate(args.elements, args.seed, args.events), end="")


if __name__ == "__main__":
    main()
