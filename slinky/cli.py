"""The ``slinky`` command line: one parser, each area adds its own sub-commands.

Areas register through ``add_parser(subparsers)`` functions so this file stays a table of contents.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def build_parser() -> argparse.ArgumentParser:
    from slinky.dev import cli as dev_cli

    parser = argparse.ArgumentParser(prog="slinky", description=__doc__)
    sub = parser.add_subparsers(dest="area", required=True, metavar="{dev,slurm,workloads}")
    dev_cli.add_parser(sub)
    try:
        from slinky.clients.slurm import cli as slurm_cli
    except ImportError:  # pragma: no cover - area not built yet
        pass
    else:
        slurm_cli.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = args.handler
    result: int = handler(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
