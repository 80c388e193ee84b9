"""`collapsar import FILE.xml [-o OUT]`: a Kollaps XML experiment as Collapsar YAML."""

from __future__ import annotations

import argparse
import sys

from collapsar.errors import CollapsarError
from collapsar.kollaps_xml import parse_xml_file, to_yaml


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE.xml", help="Kollaps experiment (XML)")
    parser.add_argument("-o", "--output", metavar="OUT", help="Write the YAML to OUT instead of standard output")


def run(args: argparse.Namespace) -> int:
    text = to_yaml(parse_xml_file(args.file))
    if args.output is None:
        sys.stdout.write(text)
        return 0
    try:
        with open(args.output, "w", encoding="utf-8") as handle:
            handle.write(text)
    except OSError as error:
        raise CollapsarError(f"{args.output}: cannot write: {error.strerror}") from error
    print(f"{args.file}: wrote {args.output}", file=sys.stderr)
    return 0
