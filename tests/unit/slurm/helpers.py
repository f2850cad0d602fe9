"""Recorded slurmrestd 26.05 answers, a tiny MockTransport router, a small fake cluster and a node snapshot for the
Slurm tests."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import httpx

from slinky.clients.slurm.auth import StaticToken
from slinky.clients.slurm.client import SlurmApi, SlurmClient
from slinky.clients.slurm.fake import FakeSlurmClient
from slinky.clients.slurm.models import Node

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "slurm"
TOKEN = "eyJhbGciOiJIUzI1NiJ9.secret-token-value.sig"


def sample(name: str) -> Any:
    """A recorded JSON file from tests/fixtures/slurm."""
    return json.loads((FIXTURES / name).read_text())


Handler = Callable[[httpx.Request], httpx.Response]


class Router:
    """Answers requests from a table keyed by (method, path); records every request."""

    def __init__(self) -> None:
        self.routes: dict[tuple[str, str], list[Handler | tuple[int, Any]]] = {}
        self.requests: list[httpx.Request] = []

    def add(self, method: str, path: str, *answers: Handler | tuple[int, Any]) -> Router:
        """Answer ``method path`` with each answer in turn; the last one repeats."""
        self.routes[(method, path)] = list(answers)
        return self

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answers = self.routes.get((request.method, request.url.path))
        if not answers:
            return httpx.Response(404, text="Not Found")
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        if callable(answer):
            return answer(request)
        status, body = answer
        return httpx.Response(status, json=body)

    def calls(self, method: str, path: str) -> list[httpx.Request]:
        """The requests sent to ``method path``."""
        return [r for r in self.requests if r.method == method and r.url.path == path]


def make_client(router: Router, **kwargs: Any) -> SlurmClient:
    """A client on the router with a static token and no retry sleeps."""
    kwargs.setdefault("token", StaticToken(TOKEN))
    kwargs.setdefault("retry_backoff_seconds", 0.0)
    return SlurmClient("http://slurmrestd.test", transport=httpx.MockTransport(router), **kwargs)


def fake_cluster(nodes: int = 2, partition: str = "p") -> FakeSlurmClient:
    """A fake Slurm with one partition of ``nodes`` idle nodes named n-1, n-2, ..."""
    fake = FakeSlurmClient()
    fake.add_partition(partition)
    for index in range(1, nodes + 1):
        fake.add_node(f"n-{index}", partitions=[partition])
    return fake


class NodeSnapshot:
    """The part of the bridge worker's node cache the phantom-allocation check reads, refreshed on demand from any
    client (the fake or slurmrestd); each Slurm node is its own Kubernetes node, with uid ``uid-<name>``."""

    def __init__(self, slurm: SlurmApi) -> None:
        self.slurm = slurm
        self.nodes: dict[str, Node] | None = None
        self.slurm_read_at = -float("inf")

    async def refresh(self) -> None:
        self.slurm_read_at = time.monotonic()
        self.nodes = {n.name: n for n in await self.slurm.list_nodes()}

    def slurm_nodes(self) -> Mapping[str, Node] | None:
        return self.nodes

    def kube_node_for(self, slurm_node: str) -> str | None:
        return slurm_node

    def kube_node(self, name: str) -> Mapping[str, Any] | None:
        return {"metadata": {"name": name, "uid": f"uid-{name}"}}
