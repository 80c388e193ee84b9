"""What the parser's message tests share (test_parser_errors_*.py,
test_parse_workload_*.py): a small document parsed as t.yaml, the
`file:line: message` lines of the TopologyError it raises, and BASE, a valid
experiment of seven lines that most message cases extend, so that the line
numbers in the expected messages are easy to check: `link(...)` appends links
from line 8, `event(...)` an events: list whose items start at line 9."""

import textwrap

import pytest

from collapsar.errors import TopologyError
from collapsar.parser import parse_text

BASE = """\
services:
  web: {command: [x]}
  db: {command: [y], replicas: 2}
bridges: [s1, s2]
links:
  - {from: web, to: s1, latency: 10ms}
  - {from: db, to: s1, latency: 1ms}
"""


def parse(text: str):
    return parse_text(textwrap.dedent(text), "t.yaml")


def problems(text: str) -> list[str]:
    with pytest.raises(TopologyError) as error:
        parse(text)
    return error.value.lines()


def event(*lines: str) -> str:
    return BASE + "events:\n" + "".join(f"  - {line}\n" for line in lines)


def link(*lines: str) -> str:
    return BASE + "".join(f"  - {line}\n" for line in lines)
