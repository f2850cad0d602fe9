"""``slinky dev up|status|down``: the local development stack."""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser("dev", help="run the local stack (kube, Slurm, Temporal)")
    dev = parser.add_subparsers(dest="dev_command", required=True)
    up = dev.add_parser("up", help="start everything (idempotent)")
    up.add_argument("--nodes", type=int, default=8, help="Kubernetes nodes = Slurm external nodes")
    up.add_argument("--slurmd", type=int, default=0, help="also start M real slurmd daemons")
    up.add_argument("--no-workers", action="store_true", help="do not start the bridge workers")
    up.add_argument(
        "--worker-nodes",
        "--workers",
        dest="worker_nodes",
        type=int,
        default=4,
        metavar="K",
        help="Kubernetes worker nodes for NodeSet pods, not in Slurm (not the bridge workers of --no-workers)",
    )
    up.set_defaults(handler=_up)
    status = dev.add_parser("status", help="health of each component")
    status.set_defaults(handler=_status)
    down = dev.add_parser("down", help="stop exactly what up started")
    down.set_defaults(handler=_down)


def _up(args: argparse.Namespace) -> int:
    from slinky.dev import stack

    return stack.up(nodes=args.nodes, slurmd=args.slurmd, workers=not args.no_workers, worker_nodes=args.worker_nodes)


def _status(args: argparse.Namespace) -> int:
    from slinky.dev import stack

    return stack.status()


def _down(args: argparse.Namespace) -> int:
    from slinky.dev import stack

    return stack.down()
