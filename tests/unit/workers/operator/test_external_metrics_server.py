"""The external metrics API server's own rules: only the front proxy may call it, each caller is authorized by a
SubjectAccessReview (kept 10 s), and paths, selectors and discovery answer as an extension apiserver does."""

from __future__ import annotations

from typing import Any, cast

from slinky.clients.kube import KubeClient
from slinky.operator.slurm_metrics import Family
from workers.operator.external_metrics import ExternalMetricsServer, FrontProxy

PEER = {"subject": ((("commonName", "front-proxy-client"),),)}
HEADERS = {"x-remote-user": ["system:serviceaccount:kube-system:horizontal-pod-autoscaler"], "x-remote-group": ["a"]}
BASE = "/apis/external.metrics.k8s.io/v1beta1"
LABELS = {"namespace": "hpc", "controller": "slurm", "partition": "cpu", "nodeset": "cpu"}


class Reviews:
    def __init__(self, allowed: bool) -> None:
        self.allowed = allowed
        self.asked: list[dict[str, Any]] = []

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.asked.append(body)
        return {"status": {"allowed": self.allowed}}


def server(allowed: bool = True) -> tuple[ExternalMetricsServer, Reviews]:
    reviews = Reviews(allowed)
    families = [Family("slurm_partition_nodes_wanted", "h", [(LABELS, 3.0)])]
    proxy = FrontProxy(ca_pem="", allowed_names=["front-proxy-client"])
    return ExternalMetricsServer(cast(KubeClient, reviews), lambda: families, proxy), reviews


async def test_only_the_front_proxy_with_a_user() -> None:
    s, _ = server()
    path = f"{BASE}/namespaces/hpc/slurm_partition_nodes_wanted"
    assert (await s.answer("GET", path, HEADERS, None))[0] == 401
    other = {"subject": ((("commonName", "someone"),),)}
    assert (await s.answer("GET", path, HEADERS, other))[0] == 401
    assert (await s.answer("GET", path, {}, PEER))[0] == 401
    code, body = await s.answer("GET", f"{path}?labelSelector=nodeset%3Dcpu", HEADERS, PEER)
    assert code == 200 and [i["value"] for i in body["items"]] == ["3"]


async def test_each_caller_is_authorized_and_the_answer_kept() -> None:
    s, reviews = server(allowed=False)
    path = f"{BASE}/namespaces/hpc/slurm_partition_nodes_wanted"
    code, body = await s.answer("GET", path, HEADERS, PEER)
    assert code == 403 and "cannot list" in body["message"]
    await s.answer("GET", path, HEADERS, PEER)
    assert len(reviews.asked) == 1, "the decision is kept"
    attrs = reviews.asked[0]["spec"]["resourceAttributes"]
    assert attrs == {
        "group": "external.metrics.k8s.io",
        "version": "v1beta1",
        "resource": "slurm_partition_nodes_wanted",
        "namespace": "hpc",
        "verb": "list",
    }
    assert reviews.asked[0]["spec"]["groups"] == ["a"]


async def test_discovery_paths_and_bad_selectors() -> None:
    s, _ = server()
    code, body = await s.answer("GET", BASE, HEADERS, PEER)
    assert code == 200 and "slurm_partition_nodes_wanted" in [r["name"] for r in body["resources"]]
    code, body = await s.answer("GET", "/apis/external.metrics.k8s.io", HEADERS, PEER)
    assert code == 200 and body["kind"] == "APIGroup"
    assert (await s.answer("GET", f"{BASE}/nodes/x", HEADERS, PEER))[0] == 404
    assert (await s.answer("POST", f"{BASE}/namespaces/hpc/m", HEADERS, PEER))[0] == 404
    code, body = await s.answer("GET", f"{BASE}/namespaces/hpc/m?labelSelector=a%3D%28", HEADERS, PEER)
    assert code == 400 and body["reason"] == "BadRequest"
    assert (await s.answer("GET", "/healthz", {}, None))[0] == 200


async def test_discovery_lists_every_metric_before_the_first_round() -> None:
    """Before the operator has read Slurm (no families yet), discovery already names what it will serve."""
    proxy = FrontProxy(ca_pem="", allowed_names=["front-proxy-client"])
    s = ExternalMetricsServer(cast(KubeClient, Reviews(True)), list, proxy)
    code, body = await s.answer("GET", BASE, HEADERS, PEER)
    names = [r["name"] for r in body["resources"]]
    assert code == 200 and names == sorted(set(names))
    assert {"slurm_partition_jobs_pending", "slurm_partition_nodes_wanted", "slurm_nodes_idle"} <= set(names)
    assert "slurm_server_thread_cnt" in names, "diag's families too, which a round adds only when diag answers"
