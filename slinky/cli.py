"""The ``slinky`` command line: one parser, each area adds its own sub-commands.

Areas register through ``add_parser(subparsers)`` functions so this file stays a table of contents.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

AREAS = (
    "slinky.dev.cli",
    "slinky.clients.slurm.cli",
    "slinky.bridge.workloads_cli",
    "slinky.operator.nodesets_cli",
    "slinky.operator.clusters_cli",
    "slinky.operator.top_cli",
)
"""Modules with an ``add_parser(subparsers)`` function, in help order."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="slinky", description=__doc__)
    sub = parser.add_subparsers(dest="area", required=True, metavar="{dev,slurm,workloads,nodesets,clusters,top}")
    for area in AREAS:
        try:
            module = importlib.import_module(area)
        except ModuleNotFoundError as err:  # an area not installed in this build
            if err.name != area:
                raise
            continue
        module.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = args.handler
    result: int = handler(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
