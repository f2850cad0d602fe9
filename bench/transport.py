"""The clients' HTTP transport: CPU per request of httpx on asyncio streams (``slinky.clients.http``, what the
clients use) against httpx's default (anyio), measured in the same run against the dev stack's API server (TLS)
and slurmrestd.

``python -m bench.transport [--requests N] [--concurrency C]``: each transport runs twice, alternating, and the
ratio of the medians is printed (below 1: ours uses less CPU per request).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from slinky.clients import http
from slinky.clients.kube import load_kubeconfig
from slinky.dev import stack

Transport = Callable[[object], httpx.AsyncBaseTransport | None]


async def _cpu_per_request(client: httpx.AsyncClient, path: str, requests: int, concurrency: int) -> float:
    """Milliseconds of this process's CPU per request, after a warm-up."""
    limit = asyncio.Semaphore(concurrency)

    async def one() -> None:
        async with limit:
            (await client.get(path)).raise_for_status()

    await asyncio.gather(*(one() for _ in range(50)))
    started = time.process_time()
    await asyncio.gather(*(one() for _ in range(requests)))
    return (time.process_time() - started) / requests * 1000


async def run(requests: int, concurrency: int) -> dict[str, dict[str, list[float]]]:
    env = stack.load_env_file()
    kube = load_kubeconfig(env["KUBECONFIG"])
    kube_headers = {"Authorization": f"Bearer {kube.token}"} if kube.token else {}
    token = Path(env["SLURM_JWT_FILE"]).read_text().strip()
    slurm_headers = {"X-SLURM-USER-NAME": "slurm", "X-SLURM-USER-TOKEN": token}
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    transports: dict[str, Transport] = {
        "anyio (httpx's default)": lambda verify: None,
        "asyncio (slinky.clients.http)": lambda verify: http.transport(verify=verify, limits=limits),  # type: ignore[arg-type]
    }
    results: dict[str, dict[str, list[float]]] = {name: {"kube": [], "slurm": []} for name in transports}
    for _ in range(2):
        for name, make in transports.items():
            async with httpx.AsyncClient(
                base_url=kube.server,
                verify=kube.ssl_context,
                headers=kube_headers,
                limits=limits,
                transport=make(kube.ssl_context),
            ) as client:
                results[name]["kube"].append(
                    await _cpu_per_request(client, "/api/v1/namespaces/default", requests, concurrency)
                )
            async with httpx.AsyncClient(
                base_url=env["SLURM_REST_URL"], headers=slurm_headers, limits=limits, transport=make(True)
            ) as client:
                results[name]["slurm"].append(
                    await _cpu_per_request(client, "/slurm/v0.0.44/ping", requests, concurrency)
                )
            print(f"[bench.transport] {name}: {results[name]}", file=sys.stderr)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=1500)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args(argv)
    if stack.status(quiet=True) != 0:
        print("bench.transport: the stack is not healthy; run `slinky dev up` first", file=sys.stderr)
        return 2
    results = asyncio.run(run(args.requests, args.concurrency))
    base, ours = results["anyio (httpx's default)"], results["asyncio (slinky.clients.http)"]
    for target in ("kube", "slurm"):
        b, o = statistics.median(base[target]), statistics.median(ours[target])
        print(f"{target}: anyio {b:.3f} ms CPU/request, asyncio {o:.3f} ms, ratio {o / b:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
