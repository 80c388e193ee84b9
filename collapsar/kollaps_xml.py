"""Import of Kollaps XML experiments, so that existing topologies run here.

The XML is read with expat into `xml.etree.ElementTree` elements, keeping each
element's line, and translated into the same `Node` tree the YAML loader
produces; the one parser of the language then validates it.  So an imported
experiment obeys exactly the rules of a written one, and problems are
reported as `file:line` of the XML element.

Kollaps conventions translated here (see docs/language.md, "Kollaps XML"):
latency and jitter are milliseconds as bare numbers, `time` is seconds,
`drop` is a ratio; a link without `download` is one-way; a service with a
`join` in `<dynamic>` starts with no instances (its joins at time 0 become its
replicas); supervisor services (the Kollaps dashboard) are not imported.
Documents with a DTD are refused: no entity expansion can happen.
"""

from __future__ import annotations

import ast
import os
import re
import xml.etree.ElementTree as ET
from xml.parsers import expat

from collapsar import parse_common as pc
from collapsar.errors import Problem, TopologyError, Where
from collapsar.model import Experiment
from collapsar.parse_common import Report, read_input
from collapsar.parser import parse_tree
from collapsar.yamlout import to_yaml
from collapsar.yamlsrc import Node

__all__ = ["parse_xml_file", "parse_xml_text", "to_yaml"]

_NUMBER = re.compile(r"^\s*[0-9]+(\.[0-9]*)?\s*$|^\s*\.[0-9]+\s*$")
_SECTIONS = ("services", "bridges", "links", "dynamic")
_ATTRIBUTES = {  # element -> (attributes read, Kollaps attributes with no meaning here)
    "experiment": ((), ("boot",)),
    "service": (("name", "image", "command", "replicas"), ("share", "reuse", "port")),
    "bridge": (("name",), ()),
    "link": (("origin", "dest", "latency", "upload", "download", "jitter", "drop"), ("network",)),
    "schedule": (
        ("name", "origin", "dest", "time", "action", "amount", "latency", "upload", "download", "jitter", "drop"),
        ("network",),
    ),
}


class _Refused(Exception):
    def __init__(self, line: int, message: str):
        super().__init__(message)
        self.line = line


class _Tree:
    """Elements with their lines (ElementTree's own parser drops them)."""

    def __init__(self) -> None:
        self.lines: dict[int, int] = {}
        self.root: ET.Element | None = None

    def line(self, element: ET.Element) -> int:
        return self.lines.get(id(element), 1)


def parse_xml_file(path: str | os.PathLike) -> Experiment:
    source, data = read_input(path)
    return parse_xml_text(data, source)


def parse_xml_text(data: str | bytes, source: str = "<memory>") -> Experiment:
    report = Report(source)
    tree = _read(data, source)
    root = _Translator(report, tree).experiment(tree.root)
    if root is None:
        report.raise_if_any()
    assert root is not None  # the translator records a problem whenever it returns None
    return parse_tree(report, root)


def _read(data: str | bytes, source: str) -> _Tree:
    tree = _Tree()
    stack: list[ET.Element] = []
    parser = expat.ParserCreate()

    def start(tag: str, attributes: dict[str, str]) -> None:
        element = ET.Element(tag, attributes)
        tree.lines[id(element)] = parser.CurrentLineNumber
        if stack:
            stack[-1].append(element)
        else:
            tree.root = element
        stack.append(element)

    def refuse(*_args) -> None:
        raise _Refused(
            parser.CurrentLineNumber,
            "DTDs and entity declarations are not accepted in an experiment; remove the <!DOCTYPE ...>",
        )

    parser.StartElementHandler = start
    parser.EndElementHandler = lambda _tag: stack.pop()
    parser.StartDoctypeDeclHandler = refuse
    parser.EntityDeclHandler = refuse
    parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
    try:
        parser.Parse(data, True)
    except _Refused as refused:
        raise TopologyError([Problem(Where(source, refused.line), str(refused))]) from None
    except expat.ExpatError as error:
        message = f"XML syntax: {expat.ErrorString(error.code)} (column {error.offset + 1})"
        raise TopologyError([Problem(Where(source, error.lineno), message)]) from None
    except (ValueError, RecursionError) as error:
        raise TopologyError([Problem(Where(source, 1), f"cannot read XML: {error}")]) from None
    return tree


class _Translator:
    """Kollaps elements -> the Node tree of the equivalent YAML document."""

    def __init__(self, report: Report, tree: _Tree):
        self.report, self.tree = report, tree
        self.supervisors: set[str | None] = set()  # None: a <service> without a name
        self.service_names: set[str | None] = set()

    def scalar(self, element: ET.Element, value: object, text: str | None = None) -> Node:
        return Node(value, self.tree.line(element), str(value) if text is None else text)

    def mapping(self, element: ET.Element, items: dict[str, Node]) -> Node:
        line = self.tree.line(element)
        return Node(dict(items), line, key_lines={key: node.line for key, node in items.items()})

    def attributes(self, element: ET.Element, label: str) -> dict[str, str]:
        read, ignored = _ATTRIBUTES[element.tag]
        for key in element.attrib:
            if key not in read and key not in ignored:
                self.report.add(
                    self.tree.line(element), f"{label}: unknown attribute {key!r}{pc.did_you_mean(key, read)}"
                )
        return {key: value for key, value in element.attrib.items() if key in read}

    def children(self, parent: ET.Element, tag: str) -> list[ET.Element]:
        kept = []
        for child in parent:
            if child.tag == tag:
                kept.append(child)
            else:
                self.report.add(
                    self.tree.line(child), f"<{parent.tag}>: unexpected element <{child.tag}>; expected <{tag}>"
                )
        return kept

    def experiment(self, root: ET.Element | None) -> Node | None:
        if root is None or root.tag != "experiment":
            tag = "nothing" if root is None else f"<{root.tag}>"
            self.report.add(
                self.tree.line(root) if root is not None else 1, f"expected a Kollaps <experiment>, got {tag}"
            )
            return None
        self.attributes(root, "<experiment>")
        sections: dict[str, ET.Element] = {}
        for child in root:
            if child.tag not in _SECTIONS:
                self.report.add(
                    self.tree.line(child),
                    f"<experiment>: unknown element <{child.tag}>{pc.did_you_mean(child.tag, _SECTIONS)}",
                )
            elif child.tag in sections:
                self.report.add(self.tree.line(child), f"<experiment>: a second <{child.tag}>; only one is allowed")
            else:
                sections[child.tag] = child
        name = pc.default_name(self.report.source)
        items = {"experiment": self.mapping(root, {"name": self.scalar(root, name)})}
        services = sections.get("services")
        declared = [] if services is None else list(services.iter("service"))
        self.supervisors = {s.get("name") for s in declared if s.get("supervisor") is not None}
        self.service_names = {s.get("name") for s in declared} - self.supervisors
        schedules = self.schedules(sections.get("dynamic"))
        items["services"] = self.services(sections.get("services"), root, schedules)
        if "bridges" in sections:
            items["bridges"] = Node(
                [
                    self.scalar(b, self.attributes(b, "bridge").get("name"))
                    for b in self.children(sections["bridges"], "bridge")
                ],
                self.tree.line(sections["bridges"]),
            )
        if "links" in sections:
            items["links"] = Node(
                self.links(self.children(sections["links"], "link")), self.tree.line(sections["links"])
            )
        items["events"] = Node(
            [event for event in (self.event(s) for s in schedules) if event is not None], self.tree.line(root)
        )
        return self.mapping(root, items)

    # ---- services ----------------------------------------------------------

    def services(self, section: ET.Element | None, root: ET.Element, schedules: list[ET.Element]) -> Node:
        if section is None:
            return Node({}, self.tree.line(root))
        joins_at_start: dict[str, int] = {}
        joined_later = set()
        for schedule in schedules:
            name, action = schedule.get("name"), schedule.get("action")
            if name is not None and action == "join" and name in self.service_names:
                if _seconds(schedule.get("time")) == 0:
                    amount = _int_or(schedule.get("amount", "1"), None)
                    if amount is None:
                        self.report.add(
                            self.tree.line(schedule),
                            f"service {name}: amount: "
                            "expected a whole number like 2, got "
                            f"{schedule.get('amount', '')[:40]!r}",
                        )
                        amount = 0
                    joins_at_start[name] = joins_at_start.get(name, 0) + amount
                else:
                    joined_later.add(name)
        items = {}
        for element in self.children(section, "service"):
            if element.get("supervisor") is not None:
                continue  # the Kollaps dashboard: Collapsar has its own
            attributes = self.attributes(element, f"service {element.get('name', '?')}")
            name = attributes.pop("name", None)
            if name is None:
                self.report.add(self.tree.line(element), "<service>: missing attribute 'name'")
                continue
            body = {key: self.scalar(element, value) for key, value in attributes.items() if key != "command"}
            command = self.command(element, attributes.get("command"), name)
            if command is not None:
                body["command"] = command
            if name in joins_at_start or name in joined_later:
                # Kollaps starts a service with joins only when they happen.
                body["replicas"] = self.scalar(element, joins_at_start.get(name, 0))
            elif "replicas" in body:
                body["replicas"] = self.scalar(element, _int_or(attributes["replicas"], attributes["replicas"]))
            items[name] = self.mapping(element, body)
        return self.mapping(section, items)

    def command(self, element: ET.Element, text: str | None, name: str) -> Node | None:
        """Kollaps writes argv as a Python list literal: "['server', '0']"."""
        if text is None:
            return None
        if not text.strip().startswith("["):
            return self.scalar(element, text)
        try:
            words = ast.literal_eval(text)
            if not isinstance(words, list):
                raise ValueError("not a list")
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            self.report.add(
                self.tree.line(element),
                f"service {name}: command: expected a list like ['server', '0'], got {text[:60]!r}",
            )
            return None
        return Node([self.scalar(element, str(word)) for word in words], self.tree.line(element))

    # ---- links and schedules -----------------------------------------------

    def links(self, elements: list[ET.Element]) -> list[Node]:
        """Kollaps writes a link that differs between its directions as two
        one-way links, one each way; Collapsar has one link per pair, so
        such twins become one link."""
        one_way = {(e.get("origin"), e.get("dest")): e for e in elements if "download" not in e.attrib}
        nodes, merged = [], set()
        for element in elements:
            if id(element) in merged:
                continue
            twin = one_way.get((element.get("dest"), element.get("origin")))
            if "download" in element.attrib or twin is None or twin is element:
                nodes.append(self.link(element))
            else:
                merged.add(id(twin))
                nodes.append(self.twins(element, twin))
        return nodes

    def twins(self, element: ET.Element, twin: ET.Element) -> Node:
        """One link from two one-way links in opposite directions: what they
        share for both directions, the rest under up (`element`'s) and down."""
        sides = []
        for one in (element, twin):
            label = f"link {one.get('origin', '?')} -> {one.get('dest', '?')}"
            props = self.link_props(one, self.attributes(one, label), label)
            if "up" in props:
                props["bandwidth"] = props.pop("up")  # a direction's own rate
            sides.append(props)
        up, down = sides
        shared = {key: node for key, node in up.items() if key in down and down[key].text == node.text}
        body = {"from": self.scalar(element, element.get("origin")), "to": self.scalar(element, element.get("dest"))}
        body.update(shared)
        for key, one, props in (("up", element, up), ("down", twin, down)):
            apart = {name: node for name, node in props.items() if name not in shared}
            if apart:
                body[key] = self.mapping(one, apart)
        return self.mapping(element, body)

    def link(self, element: ET.Element) -> Node:
        label = f"link {element.get('origin', '?')} -> {element.get('dest', '?')}"
        attributes = self.attributes(element, label)
        body = self.link_props(element, attributes, label)
        for source, key in (("origin", "from"), ("dest", "to")):
            if source in attributes:
                body[key] = self.scalar(element, attributes[source])
        if "download" not in attributes:
            body["direction"] = self.scalar(element, "one-way")
        return self.mapping(element, body)

    def link_props(self, element: ET.Element, attributes: dict[str, str], label: str) -> dict[str, Node]:
        body = {}
        for source, key in (("latency", "latency"), ("jitter", "jitter")):
            if source in attributes:
                text = attributes[source]
                if not _NUMBER.match(text):
                    self.report.add(
                        self.tree.line(element),
                        f"{label}: {source}: expected milliseconds like 10 or 0.5, got {text[:40]!r}",
                    )
                    continue
                body[key] = self.scalar(element, f"{text.strip()}ms")
        for source, key in (("upload", "up"), ("download", "down"), ("drop", "loss")):
            if source in attributes:
                body[key] = self.scalar(element, attributes[source])
        return body

    def schedules(self, section: ET.Element | None) -> list[ET.Element]:
        return [] if section is None else self.children(section, "schedule")

    def event(self, element: ET.Element) -> Node | None:
        attributes = self.attributes(element, "schedule")
        line = self.tree.line(element)
        seconds = _seconds(attributes.get("time"))
        if seconds is None:
            self.report.add(
                line, f"schedule: time: expected seconds like 10 or 2.5, got {attributes.get('time', 'nothing')!r}"
            )
            return None
        body = {"at": self.scalar(element, f"{seconds!r}s" if seconds else 0)}
        if "name" in attributes:
            return self.named_event(element, attributes, body, seconds)
        if "origin" not in attributes or "dest" not in attributes:
            self.report.add(line, "schedule: needs name (a service or bridge) or origin and dest (a link)")
            return None
        label = f"link {attributes['origin']} -> {attributes['dest']}"
        body["link"] = Node([self.scalar(element, attributes[key]) for key in ("origin", "dest")], line)
        props = self.link_props(element, attributes, label)
        if "action" in attributes:
            body["action"] = self.scalar(element, attributes["action"])
            if attributes["action"] == "join" and props:
                body.update(props)
                if "download" not in attributes:
                    body["direction"] = self.scalar(element, "one-way")
        elif props:
            body["set"] = self.mapping(element, self.change(element, props, "download" in attributes))
        else:
            self.report.add(line, f"{label}: schedule needs an action or link properties")
            return None
        return self.mapping(element, body)

    def change(self, element: ET.Element, props: dict[str, Node], both_ways: bool) -> dict[str, Node]:
        """A link change without `download` acts, in Kollaps, on the
        direction from origin to dest alone: `up` of the `set`."""
        if both_ways:
            return props
        if "up" in props:
            props["bandwidth"] = props.pop("up")
        return {"up": self.mapping(element, props)}

    def named_event(
        self, element: ET.Element, attributes: dict[str, str], body: dict[str, Node], seconds: float
    ) -> Node | None:
        name, action = attributes["name"], attributes.get("action")
        if name in self.supervisors:
            return None
        if action == "join" and seconds == 0 and name in self.service_names:
            return None  # counted in the service's replicas
        kind = "bridge" if self.is_bridge(name) else "service"
        body[kind] = self.scalar(element, name)
        if action is not None:
            body["action"] = self.scalar(element, action)
        if "amount" in attributes:
            body["amount"] = self.scalar(element, _int_or(attributes["amount"], attributes["amount"]))
        return self.mapping(element, body)

    def is_bridge(self, name: str) -> bool:
        root = self.tree.root
        assert root is not None  # asked while translating, after the document was read
        return any(bridge.get("name") == name for bridge in root.iter("bridge"))


def _seconds(text: str | None) -> float | None:
    if text is None or not _NUMBER.match(text):
        return None
    return float(text)


def _int_or(text: str, fallback):
    return int(text) if re.fullmatch(r"\s*[0-9]{1,9}\s*", text) else fallback
