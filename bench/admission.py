"""Bad input at scale: a burst of pods with invalid annotations, answered at admission, beside valid ones.

Needs the local stack (``slinky dev up``: the admission webhook is registered). In a fresh namespace it times
``--valid`` valid bridge pods, created one after another (create -> the API server's answer, which includes the
webhook's review), first alone, then while ``--invalid`` pods with an invalid annotation are created by
``--clients`` concurrent clients. It checks that every invalid pod was denied with the annotation's name in the
message, and that none of them exists, has a lifecycle or a Slurm job. Usage::

    .venv/bin/python -m bench.admission --invalid 1000 --valid 64
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import time
import uuid
from typing import Any

from bench.common import Progress, run_cancellable
from slinky import wellknown
from slinky.clients.errors import KubeError
from slinky.clients.kube import KubeClient, pod_path
from slinky.dev import stack

BAD = {wellknown.ANNOTATION_TIMELIMIT: "not-a-duration"}
"""An annotation the webhook refuses (docs/bridge.md, "Errors and what they mean")."""


def pod(namespace: str, name: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations or {}},
        "spec": {"schedulerName": wellknown.SCHEDULER_NAME, "containers": [{"name": "c", "image": "busybox"}]},
    }


def dist(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 1),
        "p99_ms": round(ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))] * 1000, 1),
        "n": len(ordered),
    }


async def valid_creates(kube: KubeClient, namespace: str, prefix: str, count: int) -> list[float]:
    latencies = []
    for i in range(count):
        started = time.monotonic()
        await kube.create(pod_path(namespace), pod(namespace, f"{prefix}{i}"))
        latencies.append(time.monotonic() - started)
    return latencies


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    env = stack.load_env_file()
    kube = KubeClient.from_kubeconfig(env["KUBECONFIG"], max_connections=args.clients + 2)
    namespace = f"bench-adm-{uuid.uuid4().hex[:6]}"
    progress = Progress("bench.admission")
    denied: list[str] = []
    wrong: list[str] = []
    await kube.create("/api/v1/namespaces", {"metadata": {"name": namespace}})
    try:
        progress.phase(f"{args.valid} valid pods alone")
        alone = await valid_creates(kube, namespace, "alone-", args.valid)
        queue: asyncio.Queue[int] = asyncio.Queue()
        for i in range(args.invalid):
            queue.put_nowait(i)

        async def client() -> None:
            while not queue.empty():
                i = queue.get_nowait()
                try:
                    await kube.create(pod_path(namespace), pod(namespace, f"bad-{i}", BAD))
                    wrong.append(f"bad-{i} was admitted")
                except KubeError as err:
                    text = str(err)
                    (denied if wellknown.ANNOTATION_TIMELIMIT in text else wrong).append(text[:200])

        started = time.monotonic()
        with progress.ticking(
            f"{args.invalid} invalid pods by {args.clients} clients, beside {args.valid} valid",
            lambda: f"{len(denied)} denied, {len(wrong)} wrong",
        ):
            burst = [asyncio.create_task(client()) for _ in range(args.clients)]
            during = await valid_creates(kube, namespace, "during-", args.valid)
            await asyncio.gather(*burst)
        burst_s = time.monotonic() - started
        existing = [p["metadata"]["name"] for p in (await kube.get(pod_path(namespace)))["items"]]
        return {
            "invalid": args.invalid,
            "denied": len(denied),
            "wrong": wrong[:5],
            "denied_per_second": round(len(denied) / burst_s, 1),
            "example_denial": denied[0] if denied else "",
            "invalid_pods_existing": sum(1 for n in existing if n.startswith("bad-")),
            "valid_alone": dist(alone),
            "valid_during_burst": dist(during),
        }
    finally:
        with contextlib.suppress(KubeError):
            await kube.delete(f"/api/v1/namespaces/{namespace}")
        await kube.aclose()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--invalid", type=int, default=1000)
    parser.add_argument("--valid", type=int, default=64)
    parser.add_argument("--clients", type=int, default=16, help="concurrent clients creating the invalid pods")
    args = parser.parse_args(argv)
    results = asyncio.run(run_cancellable(lambda: measure(args)))
    print(json.dumps(results, indent=2))
    ok = results["denied"] == args.invalid and not results["wrong"] and not results["invalid_pods_existing"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
