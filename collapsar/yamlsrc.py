"""YAML with a line number on every key and value.

PyYAML's composer gives nodes with `start_mark`; the constructors throw those
away.  This module composes with the safe loader and builds `Node`s itself, so
that every later message can say `file:line`.  It accepts only plain data:
mappings, sequences and the scalars of the YAML core schema; any other tag
(`!!python/object`, `!custom`, `!!binary`, ...) is a problem, never constructed.

Mapping keys are kept as the text written (`on:` stays the key 'on', not
True); a scalar value keeps both its resolved value and its text, so a command
item written `10` can become the argument "10" exactly as typed.  Merge keys
(`<<: *defaults`) work as in YAML 1.1, which makes link templates possible.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml.constructor import SafeConstructor

from collapsar.errors import Problem, Where

_CORE = "tag:yaml.org,2002:"
_AS_TEXT = {_CORE + "str", _CORE + "timestamp", _CORE + "value"}
_SCALARS = {
    _CORE + "int": SafeConstructor.construct_yaml_int,
    _CORE + "float": SafeConstructor.construct_yaml_float,
    _CORE + "bool": SafeConstructor.construct_yaml_bool,
    _CORE + "null": SafeConstructor.construct_yaml_null,
}


@dataclass(eq=False)
class Node:
    """One YAML value: `value` is a scalar, a list of Nodes or a dict of Nodes."""

    # Any, not a union: callers test is_mapping / is_list / is_scalar before
    # they use `value`, and a type checker cannot narrow through a property.
    value: Any
    line: int
    text: str | None = None  # a scalar as written
    key_lines: dict[str, int] = field(default_factory=dict)

    @property
    def is_mapping(self) -> bool:
        return isinstance(self.value, dict)

    @property
    def is_list(self) -> bool:
        return isinstance(self.value, list)

    @property
    def is_scalar(self) -> bool:
        return not (self.is_mapping or self.is_list)


MAX_FLOW_DEPTH = 100
_BRACKETS = re.compile(r"[\[\]{}]")


def load(text: str, source: str, problems: list[Problem]) -> Node | None:
    """Compose `text` into Nodes; syntax problems are appended, never raised."""
    too_deep = _too_deep(text)
    if too_deep:
        problems.append(
            Problem(
                Where(source, too_deep), f"YAML nesting is too deep (more than {MAX_FLOW_DEPTH} levels of [ and {{)"
            )
        )
        return None
    try:
        root = _compose(text)
    except yaml.YAMLError as error:
        problems.append(_syntax_problem(error, text, source))
        return None
    except RecursionError:
        problems.append(Problem(Where(source, 1), "YAML nesting is too deep"))
        return None
    if root is None:
        problems.append(
            Problem(
                Where(source, 1),
                "the file is empty; expected a mapping with experiment, services, bridges, links and events",
            )
        )
        return None
    builder = _Builder(source, problems)
    try:
        return builder.build(root)
    except RecursionError:
        problems.append(Problem(Where(source, 1), "YAML nesting is too deep"))
        return None


def _compose(text: str) -> yaml.Node | None:
    """libyaml's composer when PyYAML has it: ten times faster on big topologies.
    On an error, the pure-Python composer reads the text again, because its
    messages are clearer and do not depend on how PyYAML was built."""
    fast = getattr(yaml, "CSafeLoader", None)
    if fast is not None:
        try:
            return yaml.compose(text, Loader=fast)
        except yaml.YAMLError:
            pass
    return yaml.compose(text, Loader=yaml.SafeLoader)


def _too_deep(text: str) -> int:
    """The line where [ and { nest deeper than any experiment needs, or 0.

    PyYAML's scanner is quadratic in flow nesting, so a hostile file of
    thousands of [ would take seconds before failing; this check is linear.
    Brackets inside quoted strings count too, which only errs on absurd input.
    """
    depth = 0
    for match in _BRACKETS.finditer(text):
        depth += 1 if match.group() in "[{" else -1
        if depth > MAX_FLOW_DEPTH:
            return text.count("\n", 0, match.start()) + 1
    return 0


def _syntax_problem(error: yaml.YAMLError, text: str, source: str) -> Problem:
    if isinstance(error, yaml.reader.ReaderError):
        # The reader reports a position in characters, not a mark.
        line = 1 + text.count("\n", 0, error.position)
        char = chr(error.character) if isinstance(error.character, int) else error.character
        return Problem(Where(source, line), f"character {char!r} is not allowed in YAML text")
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    line = mark.line + 1 if mark is not None else 1
    what = getattr(error, "problem", None) or str(error).splitlines()[0]
    context, context_mark = getattr(error, "context", None), getattr(error, "context_mark", None)
    if context and not context.startswith("while"):
        what = f"{context}, {what}"
    elif context and context_mark is not None and context_mark.line + 1 != line:
        what += f" ({context} started at line {context_mark.line + 1})"
    elif context:
        what = f"{context}: {what}"
    return Problem(Where(source, line), f"YAML syntax: {what}")


class _Builder:
    def __init__(self, source: str, problems: list[Problem]):
        self.source = source
        self.problems = problems
        # Aliases point at one composed node; building it once keeps a
        # "billion laughs" document linear in size.
        self.built: dict[int, Node] = {}

    def problem(self, line: int, message: str) -> None:
        self.problems.append(Problem(Where(self.source, line), message))

    def build(self, node: yaml.Node) -> Node:
        done = self.built.get(id(node))
        if done is not None:
            return done
        line = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            result = Node({}, line)
            self.built[id(node)] = result
            self._fill_mapping(node, result)
        elif isinstance(node, yaml.SequenceNode):
            result = Node([], line)
            self.built[id(node)] = result
            self._check_tag(node, _CORE + "seq")
            result.value.extend(self.build(item) for item in node.value)
        else:
            result = self._scalar(node, line)
            self.built[id(node)] = result
        return result

    def _check_tag(self, node: yaml.Node, expected: str) -> None:
        if node.tag != expected:
            tag = node.tag.replace(_CORE, "!!")
            self.problem(
                node.start_mark.line + 1,
                f"unsupported YAML tag {tag!r}; only plain mappings, lists, strings and numbers are read",
            )

    def _scalar(self, node: yaml.ScalarNode, line: int) -> Node:
        if node.tag in _AS_TEXT:
            return Node(node.value, line, node.value)
        construct = _SCALARS.get(node.tag)
        if construct is None:
            self._check_tag(node, _CORE + "str")
            return Node(node.value, line, node.value)
        try:
            value = construct(_CONSTRUCTOR, node)
        except (ValueError, ArithmeticError, LookupError, TypeError):
            # `!!bool maybe`, an int of 5000 digits: keep the text; callers reject it.
            value = node.value
        return Node(value, line, node.value)

    def _fill_mapping(self, node: yaml.MappingNode, result: Node) -> None:
        self._check_tag(node, _CORE + "map")
        merged: list[Node] = []
        for key_node, value_node in node.value:
            key_line = key_node.start_mark.line + 1
            if key_node.tag == _CORE + "merge":
                merged.extend(self._merge_sources(value_node))
                continue
            if not isinstance(key_node, yaml.ScalarNode):
                self.problem(key_line, "a mapping key must be a plain name, not a list or mapping")
                continue
            key = key_node.value
            if key in result.value:
                self.problem(key_line, f"duplicate key {key!r} (first at line {result.key_lines[key]})")
                continue
            result.value[key] = self.build(value_node)
            result.key_lines[key] = key_line
        # Explicit keys win over merged ones; earlier merge sources win over later.
        for source in merged:
            for key, value in source.value.items():
                if key not in result.value:
                    result.value[key] = value
                    result.key_lines[key] = source.key_lines[key]

    def _merge_sources(self, node: yaml.Node) -> list[Node]:
        items = node.value if isinstance(node, yaml.SequenceNode) else [node]
        sources = []
        for item in items:
            built = self.build(item)
            if built.is_mapping:
                sources.append(built)
            else:
                self.problem(built.line, "'<<' merges mappings only (write <<: *name)")
        return sources


_CONSTRUCTOR = SafeConstructor()
