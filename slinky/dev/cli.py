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
    up.add_argument(
        "--real-nodes",
        type=int,
        default=2,
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
    run = dev.add_parser(
        "exec",
        help="run a command inside a daemon pod (its network, mounts and hostname, the Slurm rootfs): "
        "what `kubectl exec` does on a real node",
    )
    run.add_argument("-n", "--namespace", default=None, help="the pod's namespace (default: any namespace)")
    run.add_argument("pod")
    run.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")
    run.set_defaults(handler=_exec)


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


def _exec(args: argparse.Namespace) -> int:
    import subprocess
    import sys

    from slinky.dev import slurmd_runtime, stack

    command = args.command[1:] if args.command[:1] == ["--"] else list(args.command)
    if not command:
        print("slinky dev exec: give a command after --", file=sys.stderr)
        return 2
    pod = args.pod.removeprefix("pod/").removeprefix("pods/")
    try:
        argv = slurmd_runtime.exec_argv(stack.slurmd_pods_dir(), stack.slurm_root(), args.namespace, pod, command)
    except ValueError as err:
        print(f"slinky dev exec: {err}", file=sys.stderr)
        return 2
    if argv is None:
        where = f"{args.namespace}/{pod}" if args.namespace else pod
        print(
            f"slinky dev exec: pod {where} runs no daemon here (only pods whose container is "
            "slurmd, slurmctld, slurmrestd, slurmdbd, login or sackd run as processes)",
            file=sys.stderr,
        )
        return 1
    return subprocess.call(argv)
