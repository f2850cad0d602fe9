"""``slinky dev up|status|down``: the local development stack."""

from __future__ import annotations

import argparse
from typing import Any

from slinky.dev import real_nodes


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
        help="simulated Kubernetes nodes for pods of namespaces not sent to the real nodes, not in Slurm "
        "(not the bridge workers of --no-workers)",
    )
    up.add_argument(
        "--real-nodes",
        type=int,
        default=real_nodes.CLUSTER_NODES_DEFAULT,
        metavar="R",
        help="real Kubernetes nodes for the Slurm clusters: kubelet, kube-proxy and containerd in network "
        "namespaces (0: none; at most 4)",
    )
    up.add_argument(
        "--real-bridge-nodes",
        type=int,
        default=2,
        metavar="B",
        help="real Kubernetes nodes that are also the bridge's external Slurm nodes, partition real-nodes (0-2)",
    )
    up.set_defaults(handler=_up)
    status = dev.add_parser("status", help="health of each component")
    status.set_defaults(handler=_status)
    built = dev.add_parser(
        "images",
        help="build the Slurm images and the project's image (podman, offline) and push them to the stack's registry",
    )
    built.add_argument("--no-push", action="store_true", help="build only (the stack need not run)")
    built.set_defaults(handler=_images)
    down = dev.add_parser("down", help="stop exactly what up started")
    down.set_defaults(handler=_down)


def _up(args: argparse.Namespace) -> int:
    from slinky.dev import stack

    return stack.up(
        nodes=args.nodes,
        slurmd=args.slurmd,
        workers=not args.no_workers,
        worker_nodes=args.worker_nodes,
        real=args.real_nodes,
        real_bridge=args.real_bridge_nodes,
    )


def _status(args: argparse.Namespace) -> int:
    from slinky.dev import stack

    return stack.status()


def _images(args: argparse.Namespace) -> int:
    from slinky.dev import stack

    return stack.build_images(push=not args.no_push)


def _down(args: argparse.Namespace) -> int:
    from slinky.dev import stack

    return stack.down()
