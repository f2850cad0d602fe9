"""The ``slinky`` command line: one parser, each area adds its own sub-commands.

Areas register through ``add_parser(subparsers)`` functions so this file stays a table of contents.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

AREAS = {
    "dev": "slinky.dev.cli",
    "slurm": "slinky.clients.slurm.cli",
    "workloads": "slinky.bridge.workloads_cli",
    "nodesets": "slinky.operator.nodesets_cli",
    "clusters": "slinky.operator.clusters_cli",
    "top": "slinky.operator.top_cli",
}
"""Each area's module, with an ``add_parser(subparsers)`` function, in help order."""


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser; with ``only`` (an area named on the command line) just that area's module is imported, so
    ``slinky workloads why`` does not pay for the dev stack's and the operator's imports."""
    parser = argparse.ArgumentParser(prog="slinky", description=__doc__)
    sub = parser.add_subparsers(dest="area", required=True, metavar="{" + ",".join(AREAS) + "}")
    for name, area in AREAS.items():
        if only is not None and name != only:
            continue
        try:
            module = importlib.import_module(area)
        except ModuleNotFoundError as err:  # an area not installed in this build
            if err.name != area:
                raise
            continue
        module.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    first = next((w for w in words if not w.startswith("-")), None)
    parser = build_parser(first if first in AREAS else None)
    args = parser.parse_args(argv)
    handler = args.handler
    result: int = handler(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
