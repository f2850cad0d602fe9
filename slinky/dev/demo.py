"""``make demo``: show the running local stack end to end, through each server's real API.

Prints the Kubernetes nodes, the matching Slurm external nodes and partition (via slurmrestd with JWT), and
the Temporal UI address. Run ``slinky dev up`` first (``make demo`` does).
"""

from __future__ import annotations

import asyncio
import json
import sys
import urllib.request
from pathlib import Path
from typing import Any

from slinky.clients.kube import KubeClient
from slinky.dev import stack


def _get(url: str, headers: dict[str, str]) -> dict[str, object]:
    req = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(req, timeout=10) as resp:
        data: dict[str, object] = json.load(resp)
        return data


async def _kube_nodes(kubeconfig: str) -> list[dict[str, Any]]:
    async with KubeClient.from_kubeconfig(kubeconfig) as kube:
        items: list[dict[str, Any]] = (await kube.get("/api/v1/nodes"))["items"]
        return items


def main() -> int:
    env = stack.load_env_file()
    print("== Kubernetes nodes (kube-apiserver v1.20.2, kept Ready by the node agent)")
    for node in asyncio.run(_kube_nodes(env["KUBECONFIG"])):
        ready = next(c["status"] for c in node["status"]["conditions"] if c["type"] == "Ready")
        cap = node["status"]["capacity"]
        print(f"  {node['metadata']['name']:16} Ready={ready:5} cpu={cap['cpu']:3} memory={cap['memory']}")
    token = Path(env["SLURM_JWT_FILE"]).read_text().strip()
    headers = {"X-SLURM-USER-NAME": "slurm", "X-SLURM-USER-TOKEN": token}
    base = env["SLURM_REST_URL"] + "/slurm/v0.0.44"
    nodes = _get(base + "/nodes", headers)["nodes"]
    parts = _get(base + "/partitions", headers)["partitions"]
    print("== Slurm nodes (slurmrestd v0.0.44, JWT)")
    for n in nodes:  # type: ignore[attr-defined]
        print(
            f"  {n['name']:16} state={'+'.join(n['state']):28} cpus={n['cpus']:3}"
            f" memory={n['real_memory']}MiB"
            f" partitions={','.join(n['partitions'])}"
        )
    print("== Slurm partitions")
    for p in parts:  # type: ignore[attr-defined]
        print(f"  {p['name']:16} nodes={p['nodes']['configured'] or '-'}")
    print("== Temporal")
    print(f"  frontend {env['TEMPORAL_ADDRESS']}  Web UI {env['TEMPORAL_UI_URL']}")
    print(f"\nsource {stack.STATE / 'env'}  # then: kubectl get nodes; temporal workflow list")
    return 0


if __name__ == "__main__":
    sys.exit(main())
