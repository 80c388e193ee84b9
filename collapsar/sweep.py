"""`--sweep PATH=V1,V2,...`: one property of an experiment over a list of
values, as one experiment text per value.

PATH walks the experiment's YAML from its top: a mapping key
(`services.web.replicas`), a list index (`links.2.latency`), or, for the
links, the link between two elements in either order (`links[sw,core]
.bandwidth`, which must name exactly one link).  The property is set, or
added, at the last step; everything before it must exist.  Each value is
read as YAML reads a scalar (`20ms`, `0.5`, `3`).  A property that the
experiment's own rules refuse at a value (a negative latency) is reported
by the parser, naming the sweep and the value, before any run starts.

The variant's text is the YAML dumped back (comments and layout are not
kept); it is what a variant's runs record as experiment.yaml.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import yaml

from collapsar.errors import CollapsarError

_LINK = re.compile(r"^links\[([^,\]]+),([^,\]]+)\]$")
MAX_VALUES = 64


@dataclass(frozen=True)
class Sweep:
    path: str
    values: tuple[str, ...]

    def label(self, value: str) -> str:
        return f"{self.path}={value}"


def parse_sweep(text: str) -> Sweep:
    """`PATH=V1,V2,...`, or one line saying what --sweep takes."""
    path, sep, values = text.partition("=")
    items = tuple(v.strip() for v in values.split(",")) if sep else ()
    if not path.strip() or not items or any(not v for v in items):
        raise CollapsarError(f"--sweep {text}: expected PATH=V1,V2,... such as 'links[sw,core].latency=10ms,20ms,40ms'")
    if len(items) > MAX_VALUES:
        raise CollapsarError(f"--sweep {text}: {len(items)} values; at most {MAX_VALUES}")
    if len(set(items)) != len(items):
        raise CollapsarError(f"--sweep {text}: a value is listed twice")
    return Sweep(path.strip(), items)


def _steps(path: str) -> list[str]:
    """The path's steps; `links[a,b]` is one step."""
    steps, rest = [], path
    while rest:
        match = re.match(r"links\[[^\]]*\]|[^.]+", rest)
        if match is None:
            break
        steps.append(match.group(0))
        rest = rest[match.end() :].removeprefix(".")
    return steps


def _key_text(node: yaml.Node) -> str | None:
    return node.value if isinstance(node, yaml.ScalarNode) else None


def _mapping_get(node: yaml.MappingNode, key: str) -> yaml.Node | None:
    return next((value for k, value in node.value if _key_text(k) == key), None)


def _child(node: yaml.Node, step: str, where: str) -> tuple[yaml.Node, int | str]:
    """(container, index or key) of `step` in `node`."""
    link = _LINK.match(step)
    if link is not None:
        links = _mapping_get(node, "links") if isinstance(node, yaml.MappingNode) else None
        ends = {link.group(1).strip(), link.group(2).strip()}
        items = links.value if isinstance(links, yaml.SequenceNode) else []
        found = [
            i
            for i, item in enumerate(items)
            if isinstance(item, yaml.MappingNode)
            and {_key_text(_mapping_get(item, "from") or item), _key_text(_mapping_get(item, "to") or item)} == ends
        ]
        if len(found) != 1:
            what = "no link" if not found else f"{len(found)} links"
            raise CollapsarError(f"--sweep {where}: {what} between {' and '.join(sorted(ends))}")
        assert links is not None
        return links, found[0]
    if isinstance(node, yaml.SequenceNode):
        if not step.isdigit() or int(step) >= len(node.value):
            raise CollapsarError(f"--sweep {where}: {step!r} is not an index of a list of {len(node.value)}")
        return node, int(step)
    if isinstance(node, yaml.MappingNode):
        return node, step
    raise CollapsarError(f"--sweep {where}: {step!r} goes into a scalar, not a mapping or list")


def variant(text: str, sweep: Sweep, value: str) -> str:
    """The experiment `text` with `sweep.path` set to `value`.  The YAML is
    edited as composed nodes and written back from them, so every other
    scalar keeps the text and style it was written with (`on:` stays a key,
    `"10"` a string)."""
    steps = _steps(sweep.path)
    if not steps or "".join(steps) != sweep.path.replace(".", ""):
        raise CollapsarError(f"--sweep {sweep.path}: expected steps separated by dots")
    try:
        document = yaml.compose(text, Loader=yaml.SafeLoader)
        new = yaml.compose(value, Loader=yaml.SafeLoader)
    except yaml.YAMLError as error:
        raise CollapsarError(f"--sweep {sweep.path}={value}: not YAML ({error})") from None
    node: yaml.Node = document
    for i, step in enumerate(steps):
        container, key = _child(node, step, sweep.path)
        if isinstance(key, int):
            if i == len(steps) - 1:
                container.value[key] = new
            node = container.value[key]
            continue
        pair = next((n for n, (k, _) in enumerate(container.value) if _key_text(k) == key), None)
        if i == len(steps) - 1:
            key_node = yaml.ScalarNode("tag:yaml.org,2002:str", key)
            if pair is None:
                container.value.append((key_node, new))
            else:
                container.value[pair] = (container.value[pair][0], new)
        elif pair is None:
            raise CollapsarError(f"--sweep {sweep.path}: the experiment has no {step!r} there")
        else:
            node = container.value[pair][1]
    return yaml.serialize(document, Dumper=yaml.SafeDumper, width=1 << 16)
