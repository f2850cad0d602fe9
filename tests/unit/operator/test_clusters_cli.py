"""`slinky clusters`: a managed and an external Controller on a fake API server (label selectors honoured), their
slurmrestd on an httpx mock transport behind the real `SlurmClient` (the JWT it sends is checked), or not there
at all; rows, tables, the URL and key resolution, and the errors a user sees."""

from __future__ import annotations

import argparse
import base64
import copy
import json
import os
import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import httpx
import pytest

from slinky.cli import build_parser
from slinky.clients.kube import KubeClient, KubeConfig
from slinky.clients.slurm import Node, SlurmApi, SlurmClient
from slinky.clients.slurm.jwt import MintedToken, claims_of
from slinky.config import Settings
from slinky.operator import clusters_cli as cli

REPO = Path(__file__).resolve().parents[3]
NOW = datetime(2026, 11, 25, 19, 0, 0, tzinfo=UTC)
API = "/apis/slinky.slurm.net/v1beta1"
JWT_KEY = b"abcdefabcdefabcdefabcdefabcdefabcdefabcdefabcdefabcdefabcdefabcd"
EXTERNAL_KEY = b"the-external-clusters-jwt-key-0123456789"
WF_ID = "reconfigure/team-a/slurm/1690493411"


def meta(name: str, ns: str = "team-a", created: str = "2026-11-25T18:00:00Z", **extra: Any) -> dict[str, Any]:
    return {"name": name, "namespace": ns, "uid": f"uid-{ns}-{name}", "creationTimestamp": created, **extra}


def cond(type_: str, status: str, reason: str, message: str) -> dict[str, Any]:
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": "2026-11-25T18:55:00Z",
        "observedGeneration": 1,
    }


# The dev stack's external Controller, as the API server returned it (plus the operator's URL annotation).
EXTERNAL: dict[str, Any] = {
    "apiVersion": "slinky.slurm.net/v1beta1",
    "kind": "Controller",
    "metadata": meta("slurm", "slurm", "2026-11-25T18:41:47Z", generation=1),
    "spec": {
        "external": True,
        "externalConfig": {"host": "slinkyctl", "port": 18817},
        "inplaceReconfigure": False,
        "jwtKeyRef": {"key": "jwt.key", "name": "slurm-jwt-key"},
    },
}

# A managed Controller with an Accounting, after one reconfigure and one rejected config (conditions shaped as
# workers/operator/controller.py writes them).
MANAGED: dict[str, Any] = {
    "apiVersion": "slinky.slurm.net/v1beta1",
    "kind": "Controller",
    "metadata": meta("slurm", generation=3),
    "spec": {
        "clusterName": "hpc",
        "slurmKeyRef": {"name": "slurm-auth-slurm", "key": "slurm.key"},
        "jwtKeyRef": {"name": "slurm-auth-jwt", "key": "jwt.key"},
        "accountingRef": {"name": "acct"},
        "slurmctld": {"image": "slurmctld:26.05"},
    },
    "status": {
        "conditions": [
            cond("FieldsSupported", "True", "Supported", "every field set is built"),
            cond("Ready", "True", "PodReady", "slurmctld pod slurm-controller-0 is ready"),
            cond(
                "ConfigValid",
                "False",
                "ConfigRejected",
                "slurm.conf 2222222222 rejected by slurmctld: error: Parse error in file /etc/slurm/slurm.conf",
            ),
        ]
    },
}

CONFIG_MAP: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": meta(
        "slurm-config",
        created="2026-11-25T18:01:00Z",
        annotations={
            "slinky.slurm.net/slurm-config-hash": "1690493411",
            "slinky.slurm.net/reconfigure-workflow": WF_ID,
            "slinky.slurm.net/reconfigured-at": "2026-11-25T18:50:00Z",
            "slinky.slurm.net/rejected-config-hash": "2222222222",
        },
    ),
    "data": {"slurm.conf": "ClusterName=hpc\n"},
}


def cr(
    kind: str, name: str, spec: dict[str, Any], created: str = "2026-11-25T18:00:00Z", **status: Any
) -> dict[str, Any]:
    obj: dict[str, Any] = {"apiVersion": "slinky.slurm.net/v1beta1", "kind": kind}
    return {**obj, "metadata": meta(name, created=created), "spec": spec, **({"status": status} if status else {})}


RESTAPI = cr("RestApi", "slurm", {"controllerRef": {"name": "slurm"}, "slurmrestd": {"image": "slurmrestd:26.05"}})
YOUNGER_RESTAPI = cr("RestApi", "slurm-b", {"controllerRef": {"name": "slurm"}}, created="2026-11-25T18:30:00Z")
OTHER_RESTAPI = cr("RestApi", "other", {"controllerRef": {"name": "other"}}, created="2026-11-25T17:00:00Z")
ACCOUNTING = cr(
    "Accounting",
    "acct",
    {"storageConfig": {"host": "mariadb", "passwordKeyRef": {"name": "db", "key": "password"}}},
    conditions=[cond("Ready", "True", "PodReady", "slurmdbd answers")],
)
LOGINSET = cr(
    "LoginSet",
    "login",
    {
        "controllerRef": {"name": "slurm"},
        "login": {"image": "login:26.05"},
        "sssdConfRef": {"name": "sssd", "key": "sssd.conf"},
    },
)
NODESET = cr("NodeSet", "cpu", {"controllerRef": {"name": "slurm"}, "replicas": 1, "slurmd": {"image": "slurmd:26.05"}})
OTHER_NODESET = cr("NodeSet", "gpu", {"controllerRef": {"name": "other"}, "replicas": 1})


def pod(
    name: str,
    labels: dict[str, str],
    *,
    ready: bool = True,
    restarts: int = 0,
    ip: str = "10.0.0.9",
    owner_uid: str = "",
) -> dict[str, Any]:
    metadata = meta(name, created="2026-11-25T18:58:00Z", labels=labels)
    if owner_uid:
        metadata["ownerReferences"] = [{"kind": "NodeSet", "name": "cpu", "uid": owner_uid, "controller": True}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {"nodeName": "slinky-worker-1", "hostname": name},
        "status": {
            "phase": "Running",
            "podIP": ip,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "containerStatuses": [{"name": "main", "restartCount": restarts}],
        },
    }


def component(app: str, instance: str, comp: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": app, "app.kubernetes.io/instance": instance, "app.kubernetes.io/component": comp}


PODS = [
    pod("slurm-controller-0", component("slurmctld", "slurm", "controller"), restarts=2, ip="10.0.0.2"),
    pod("slurm-restapi-5d9f-abcde", component("slurmrestd", "slurm", "restapi"), ip="10.0.0.7"),
    pod("acct-accounting-0", component("slurmdbd", "acct", "accounting"), ip="10.0.0.3"),
    pod("login-7c4b-xyz", component("login", "login", "login"), ready=False, ip="10.0.0.4"),
    pod(
        "cpu-0",
        {"app.kubernetes.io/name": "slurmd", "app.kubernetes.io/instance": "cpu"},
        ip="10.0.0.5",
        owner_uid="uid-team-a-cpu",
    ),
    # Another cluster's daemons in the same namespace: not this one's.
    pod("other-controller-0", component("slurmctld", "other", "controller")),
    pod("other-restapi-1", component("slurmrestd", "other", "restapi")),
]


def secret(name: str, ns: str, key: str, value: bytes) -> dict[str, Any]:
    return {"kind": "Secret", "metadata": meta(name, ns), "data": {key: base64.b64encode(value).decode()}}


def endpoints(name: str, *ips: str) -> dict[str, Any]:
    subsets = [{"addresses": [{"ip": ip} for ip in ips], "ports": [{"port": 6820}]}] if ips else []
    return {"kind": "Endpoints", "metadata": meta(name), "subsets": subsets}


def world() -> dict[str, Any]:
    """Every object the fake API server serves, by path; lists are answered from the `items` paths."""
    return {
        f"{API}/namespaces/team-a/controllers": [MANAGED],
        f"{API}/namespaces/slurm/controllers": [EXTERNAL],
        f"{API}/namespaces/team-a/restapis": [YOUNGER_RESTAPI, RESTAPI, OTHER_RESTAPI],
        f"{API}/namespaces/team-a/accountings": [ACCOUNTING],
        f"{API}/namespaces/team-a/loginsets": [LOGINSET],
        f"{API}/namespaces/team-a/nodesets": [NODESET, OTHER_NODESET],
        "/api/v1/namespaces/team-a/pods": PODS,
        "/api/v1/namespaces/team-a/configmaps": [CONFIG_MAP],
        "/api/v1/namespaces/team-a/secrets": [secret("slurm-auth-jwt", "team-a", "jwt.key", JWT_KEY)],
        "/api/v1/namespaces/slurm/secrets": [secret("slurm-jwt-key", "slurm", "jwt.key", EXTERNAL_KEY)],
        "/api/v1/namespaces/team-a/endpoints": [endpoints("slurm-restapi", "10.0.0.7")],
    }


def _matches(obj: dict[str, Any], selector: str) -> bool:
    labels = obj["metadata"].get("labels") or {}
    return all(labels.get(k) == v for k, v in (term.split("=", 1) for term in selector.split(",") if term))


COLLECTION = re.compile(
    rf"^({API}/namespaces/[^/]+/(controllers|restapis|accountings|loginsets|nodesets)"
    r"|/api/v1/namespaces/[^/]+/(pods|configmaps|secrets|endpoints))$"
)


class FakeApi:
    """GET of a collection (every namespace's when the path has none; `labelSelector` honoured) or one object."""

    def __init__(self, objects: dict[str, Any]) -> None:
        self.objects = objects
        self.paths: list[str] = []

    def answer(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        self.paths.append(path)
        selector = parse_qs(request.url.query.decode()).get("labelSelector", [""])[0]
        if path == f"{API}/controllers":  # -A
            items = [o for p, objs in self.objects.items() if p.endswith("/controllers") for o in objs]
            return httpx.Response(200, json={"kind": "ControllerList", "metadata": {}, "items": items})
        if path in self.objects:
            items = [o for o in self.objects[path] if _matches(o, selector)]
            return httpx.Response(200, json={"kind": "List", "metadata": {}, "items": items})
        collection, _, name = path.rpartition("/")
        for obj in self.objects.get(collection, []):
            if obj["metadata"]["name"] == name:
                return httpx.Response(200, json=obj)
        if path == API:
            return httpx.Response(200, json={"resources": [{"name": "controllers"}, {"name": "nodesets"}]})
        if COLLECTION.match(path):  # a namespace without any
            return httpx.Response(200, json={"kind": "List", "metadata": {}, "items": []})
        return httpx.Response(404, json={"kind": "Status", "reason": "NotFound", "message": f"{path} not found"})

    def client(self) -> KubeClient:
        return KubeClient(
            KubeConfig(server="http://kube.test", ssl_context=False), transport=httpx.MockTransport(self.answer)
        )


SLURM_NODES = {
    "http://10.0.0.7:6820": [
        {"name": "cpu-0", "state": ["IDLE", "DYNAMIC_NORM"]},
        {"name": "cpu-1", "state": ["MIXED", "DRAIN", "DYNAMIC_NORM"]},
        {"name": "cpu-2", "state": ["IDLE", "DYNAMIC_NORM"]},
    ],
    "http://rest.external:6820": [{"name": f"slinky-node-{i}", "state": ["IDLE", "EXTERNAL"]} for i in range(1, 9)],
}


class FakeSlurm:
    """slurmrestd of every URL in `nodes` (else connection refused), behind the real client; records each ask."""

    def __init__(self, nodes: dict[str, list[dict[str, Any]]] | None = None) -> None:
        self.nodes = SLURM_NODES if nodes is None else nodes
        self.asked: list[tuple[str, str, str]] = []
        """(base URL, path, JWT) of every request."""

    def factory(self, target: cli.SlurmTarget) -> SlurmApi:
        def answer(request: httpx.Request) -> httpx.Response:
            base = f"{request.url.scheme}://{request.url.host}:{request.url.port}"
            self.asked.append((base, request.url.path, request.headers.get("X-SLURM-USER-TOKEN", "")))
            if base not in self.nodes:
                raise httpx.ConnectError("connection refused", request=request)
            return httpx.Response(200, json={"nodes": self.nodes[base], "errors": [], "warnings": []})

        token = MintedToken(read_key=lambda: target.key)
        return SlurmClient(target.url, token=token, transport=httpx.MockTransport(answer), read_retries=0)


def stack_settings() -> Settings:
    """As the dev stack's: slurmrestd by Endpoints address; the external Controllers' URL given."""
    return Settings(operator={"service_addresses": "endpoints", "rest_url": "http://rest.external:6820"})


def sources(
    objects: dict[str, Any] | None = None,
    settings: Settings | None = None,
    slurm: FakeSlurm | None = None,
) -> tuple[cli.Sources, FakeApi, FakeSlurm]:
    api, fake = FakeApi(world() if objects is None else objects), slurm or FakeSlurm()
    return cli.Sources(settings or stack_settings(), kube=api.client(), slurm=fake.factory), api, fake


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["clusters", *argv])


@pytest.fixture(autouse=True)
def fixed_now_and_no_settings_from_the_shell(monkeypatch: pytest.MonkeyPatch) -> None:
    """`NOW` is now, and a sourced dev env (SLINKY_OPERATOR__..., SLURM_REST_URL) does not reach `Settings()`."""
    monkeypatch.setattr(cli, "_now", lambda: NOW)
    for name in list(os.environ):
        if name.startswith(("SLINKY_", "SLURM_", "KUBECONFIG", "TEMPORAL_")):
            monkeypatch.delenv(name)


async def run(argv: list[str], src: cli.Sources) -> int:
    args = parse(*argv)
    return await cli.run_async(args.command, args, src)


# ------------------------------------------------------------------------------------------ list
async def test_list_shows_a_managed_and_an_external_controller(capsys: pytest.CaptureFixture[str]) -> None:
    src, api, slurm = sources()
    assert await run(["list", "-A"], src) == 0
    out = capsys.readouterr()
    lines = out.out.splitlines()
    assert lines[0].split() == [
        "NAMESPACE",
        "NAME",
        "MODE",
        "CLUSTERNAME",
        "CONFIG",
        "RECONFIGURED",
        "READY",
        "NODES",
        "AGE",
    ]
    assert lines[1].split() == ["slurm", "slurm", "external", "slurm_slurm", "-", "-", "-", "8/0/0/0", "18m"]
    assert lines[2].split() == ["team-a", "slurm", "managed", "hpc", "1690493411", "10m", "True", "2/1/0/1", "60m"]
    assert len(lines) == 3 and out.err == ""
    asked = {(base, path) for base, path, _ in slurm.asked}
    assert asked == {
        ("http://10.0.0.7:6820", "/slurm/v0.0.44/nodes"),  # the oldest RestApi's Endpoints address
        ("http://rest.external:6820", "/slurm/v0.0.44/nodes"),  # SLINKY_OPERATOR__REST_URL
    }
    assert f"{API}/controllers" in api.paths


async def test_each_cluster_is_asked_with_a_jwt_of_its_own_key(capsys: pytest.CaptureFixture[str]) -> None:
    src, _, slurm = sources()
    await run(["list", "-A"], src)
    tokens = {base: token for base, _, token in slurm.asked}
    assert claims_of(tokens["http://10.0.0.7:6820"], JWT_KEY)["sun"] == "slurm"
    assert claims_of(tokens["http://rest.external:6820"], EXTERNAL_KEY)["sun"] == "slurm"


async def test_list_as_json_carries_the_counts_and_why_slurm_was_not_asked(
    capsys: pytest.CaptureFixture[str],
) -> None:
    objects = world()
    objects["/api/v1/namespaces/team-a/endpoints"] = [endpoints("slurm-restapi")]  # slurmrestd not ready
    src, _, _ = sources(objects)
    assert await run(["list", "-n", "team-a", "-o", "json"], src) == 0
    out = capsys.readouterr()
    (row,) = json.loads(out.out)
    assert (row["name"], row["mode"], row["nodes"], row["nodeCounts"]) == ("slurm", "managed", "?", None)
    assert row["slurmProblem"] == (
        "not asked: RestApi team-a/slurm has no ready slurmrestd pod (Endpoints slurm-restapi)"
    )
    assert out.err == f"note: team-a/slurm: NODES ?: Slurm {row['slurmProblem']}\n"


async def test_a_slurm_that_refuses_connections_is_a_question_mark_not_a_crash(
    capsys: pytest.CaptureFixture[str],
) -> None:
    src, _, slurm = sources(slurm=FakeSlurm(nodes={}))
    assert await run(["list", "-A"], src) == 0
    out = capsys.readouterr()
    assert [line.split()[7] for line in out.out.splitlines()[1:]] == ["?", "?"]
    err = out.err.splitlines()
    assert err == [
        "note: slurm/slurm: NODES ?: Slurm unreachable at http://rest.external:6820: "
        "GET /slurm/v0.0.44/nodes: slurmrestd unreachable (ConnectError)",
        "note: team-a/slurm: NODES ?: Slurm unreachable at http://10.0.0.7:6820: "
        "GET /slurm/v0.0.44/nodes: slurmrestd unreachable (ConnectError)",
    ]
    assert len(slurm.asked) == 2


async def test_the_real_client_on_a_closed_port_is_a_one_line_reason(capsys: pytest.CaptureFixture[str]) -> None:
    """No fake Slurm: the client the CLI builds, against a port nothing listens on."""
    api = FakeApi(world())
    settings = Settings(operator={"rest_url": "http://127.0.0.1:1"})
    src = cli.Sources(settings, kube=api.client())
    assert await run(["list", "-n", "slurm"], src) == 0
    out = capsys.readouterr()
    assert out.out.splitlines()[1].split()[7] == "?"
    assert out.err.startswith("note: slurm/slurm: NODES ?: Slurm unreachable at http://127.0.0.1:1: ")
    assert out.err.count("\n") == 1 and "Traceback" not in out.err


def test_a_managed_controller_without_its_config_map_yet() -> None:
    row = cli.cluster_row(MANAGED, None, cli.SlurmRead(problem="not asked: x"), NOW)
    assert (row["config"], row["reconfigured"], row["nodes"]) == ("<none>", "", "?")
    fresh = copy.deepcopy(MANAGED)
    del fresh["status"]
    assert cli.cluster_row(fresh, CONFIG_MAP, cli.SlurmRead(), NOW)["ready"] == "Unknown"


def test_reconfigured_falls_back_to_the_config_maps_creation() -> None:
    cm = copy.deepcopy(CONFIG_MAP)
    for key in ("reconfigure-workflow", "reconfigured-at", "rejected-config-hash"):
        del cm["metadata"]["annotations"][f"slinky.slurm.net/{key}"]
    info = cli.config_info(MANAGED, cm, NOW)
    assert (info["hash"], info["reconfiguredAt"], info["since"], info["sinceAge"]) == (
        "1690493411",
        "",
        "2026-11-25T18:01:00Z",
        "59m",
    )
    text = cli.render_show(cli.cluster_detail(cli.ClusterObjects(MANAGED, cm), cli.SlurmRead(), NOW))
    assert "Reconfigured:  never (config written 2026-11-25T18:01:00Z, 59m ago)" in text
    assert "Rejected:" not in text


def test_the_nodes_column_counts_as_a_nodesets_status() -> None:
    nodes = [Node.model_validate(n) for n in SLURM_NODES["http://10.0.0.7:6820"]]
    nodes.append(Node(name="cpu-3", state=["DOWN", "DRAIN"]))
    nodes.append(Node(name="cpu-4", state=["ALLOCATED"]))
    counts = cli.node_counts(nodes)
    assert counts == {"idle": 2, "allocated": 2, "down": 1, "drain": 2}
    assert cli.nodes_column(counts) == "2/2/1/2"
    assert cli.nodes_column(None) == "?"
    assert cli.nodes_by_state(nodes) == [
        {"state": "IDLE+DYNAMIC_NORM", "count": 2, "nodes": "cpu-[0,2]"},
        {"state": "ALLOCATED", "count": 1, "nodes": "cpu-4"},
        {"state": "DOWN+DRAIN", "count": 1, "nodes": "cpu-3"},
        {"state": "MIXED+DRAIN+DYNAMIC_NORM", "count": 1, "nodes": "cpu-1"},
    ]


# ------------------------------------------------------------------------------------------ show
async def test_show_prints_every_daemon_pod_of_the_cluster_and_no_other(capsys: pytest.CaptureFixture[str]) -> None:
    src, _, _ = sources()
    assert await run(["show", "slurm", "-n", "team-a", "-o", "json"], src) == 0
    detail = json.loads(capsys.readouterr().out)
    pods = [(p["daemon"], p["owner"], p["name"], p["ready"], p["restarts"], p["podIP"]) for p in detail["pods"]]
    assert pods == [
        ("slurmctld", "slurm", "slurm-controller-0", True, 2, "10.0.0.2"),
        ("slurmrestd", "slurm", "slurm-restapi-5d9f-abcde", True, 0, "10.0.0.7"),
        ("slurmdbd", "acct", "acct-accounting-0", True, 0, "10.0.0.3"),
        ("login", "login", "login-7c4b-xyz", False, 0, "10.0.0.4"),
        ("slurmd", "cpu", "cpu-0", True, 0, "10.0.0.5"),
    ]
    assert {p["node"] for p in detail["pods"]} == {"slinky-worker-1"}
    assert [c["type"] for c in detail["conditions"]] == ["ConfigValid", "Ready", "FieldsSupported"]
    assert detail["accounting"] == {
        "name": "acct",
        "state": "reachable",
        "detail": "slurmdbd pod acct-accounting-0 ready, Ready=True (PodReady)",
    }


async def test_show_as_a_table(capsys: pytest.CaptureFixture[str]) -> None:
    src, _, _ = sources()
    assert await run(["show", "slurm", "-n", "team-a"], src) == 0
    out = capsys.readouterr()
    text = out.out
    assert out.err == ""
    assert "Mode:          managed\n" in text and "ClusterName:   hpc\n" in text
    assert "Config:        1690493411 (ConfigMap slurm-config)\n" in text
    assert f"Reconfigured:  2026-11-25T18:50:00Z (10m ago) by workflow {WF_ID}\n" in text
    assert "Rejected:      2222222222 (not applied; slurmctld runs 1690493411; ConfigValid says why)\n" in text
    lines = text.splitlines()
    conditions = lines.index("Conditions:")
    assert lines[conditions + 1].split() == ["TYPE", "STATUS", "REASON", "AGE", "MESSAGE"]
    assert lines[conditions + 2].split()[:4] == ["ConfigValid", "False", "ConfigRejected", "5m"]
    assert lines[conditions + 2].endswith("error: Parse error in file /etc/slurm/slurm.conf")
    pods = lines.index("Daemon pods:")
    assert lines[pods + 1].split() == ["DAEMON", "OF", "NAME", "PHASE", "READY", "RESTARTS", "IP", "NODE", "AGE"]
    assert lines[pods + 2].split() == [
        "slurmctld",
        "slurm",
        "slurm-controller-0",
        "Running",
        "true",
        "2",
        "10.0.0.2",
        "slinky-worker-1",
        "2m",
    ]
    assert [line.split()[0] for line in lines[pods + 2 : pods + 7]] == [
        "slurmctld",
        "slurmrestd",
        "slurmdbd",
        "login",
        "slurmd",
    ]
    assert "Slurm nodes:   3 at http://10.0.0.7:6820: 2 idle, 1 allocated, 0 down, 1 drain" in text
    nodes = next(i for i, line in enumerate(lines) if line.split()[:2] == ["STATE", "COUNT"])
    assert lines[nodes + 1].split() == ["IDLE+DYNAMIC_NORM", "2", "cpu-[0,2]"]
    assert lines[-1] == (
        "Accounting:    reachable (Accounting acct): slurmdbd pod acct-accounting-0 ready, Ready=True (PodReady)"
    )


async def test_show_of_the_external_controller(capsys: pytest.CaptureFixture[str]) -> None:
    src, _, _ = sources()
    assert await run(["show", "slurm", "-n", "slurm"], src) == 0
    text = capsys.readouterr().out
    assert "Mode:          external (slurmctld at slinkyctl:18817)\n" in text
    assert "ClusterName:   slurm_slurm\n" in text
    assert "Config:        - (external: the operator does not write its slurm.conf)\n" in text
    assert "Ready:         - (external)\n" in text
    assert "Daemon pods:\n  none\n" in text
    assert "Slurm nodes:   8 at http://rest.external:6820: 8 idle, 0 allocated, 0 down, 0 drain\n" in text
    assert "  IDLE+EXTERNAL   8       slinky-node-[1-8]\n" in text
    assert text.endswith("Accounting:    not configured: no spec.accountingRef\n")


async def test_show_says_clearly_when_slurm_is_unreachable(capsys: pytest.CaptureFixture[str]) -> None:
    src, _, _ = sources(slurm=FakeSlurm(nodes={}))
    assert await run(["show", "slurm", "-n", "team-a"], src) == 0
    out = capsys.readouterr()
    assert (
        "Slurm nodes:   unknown: Slurm unreachable at http://10.0.0.7:6820: "
        "GET /slurm/v0.0.44/nodes: slurmrestd unreachable (ConnectError)\n"
    ) in out.out
    assert "Daemon pods:" in out.out and "STATE" not in out.out


async def test_show_of_a_missing_controller_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    src, _, _ = sources()
    assert await run(["show", "nope", "-n", "team-a"], src) == 1
    out = capsys.readouterr()
    assert (out.out, out.err) == ("", "error: Controller 'nope' not found in namespace 'team-a'\n")


@pytest.mark.parametrize("argv", [["show", "x", "-n", "a"], ["list", "-A"]])
async def test_a_missing_crd_is_named(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    def nothing(request: httpx.Request) -> httpx.Response:
        return httpx.Response(404, text="404 page not found")

    kube = KubeClient(KubeConfig(server="http://kube.test", ssl_context=False), transport=httpx.MockTransport(nothing))
    assert await run(argv, cli.Sources(Settings(), kube=kube)) == 1
    assert capsys.readouterr().err == (
        "error: the Controller CRD is not installed (the API server serves no controllers.slinky.slurm.net)\n"
    )


# ------------------------------------------------------------------------------------------ accounting
def slurmdbd_row(ready: bool) -> dict[str, Any]:
    return cli.daemon_pod_row("slurmdbd", "acct", pod("acct-accounting-0", {}, ready=ready), NOW)


def with_ready(status: str, reason: str, message: str = "") -> dict[str, Any]:
    acct = copy.deepcopy(ACCOUNTING)
    acct["status"]["conditions"] = [cond("Ready", status, reason, message)]
    return acct


@pytest.mark.parametrize(
    ("controller", "accounting", "pods", "state", "detail"),
    [
        (EXTERNAL, None, [], "not configured", "no spec.accountingRef"),
        (MANAGED, None, [], "unreachable", "Accounting team-a/acct does not exist"),
        (MANAGED, ACCOUNTING, [], "unreachable", "no slurmdbd pod, Ready=True (PodReady)"),
        (
            MANAGED,
            {**ACCOUNTING, "status": {}},
            [False],
            "unreachable",
            "slurmdbd pod acct-accounting-0 not ready",
        ),
        (MANAGED, {**ACCOUNTING, "status": {}}, [True], "reachable", "slurmdbd pod acct-accounting-0 ready"),
        (
            MANAGED,
            with_ready("False", "DatabaseUnreachable", "cannot connect to mariadb:3306"),
            [True],
            "unreachable",
            "Ready=False (DatabaseUnreachable): cannot connect to mariadb:3306",
        ),
        (
            MANAGED,
            {**ACCOUNTING, "spec": {"external": True, "externalConfig": {"host": "dbd.example", "port": 6819}}},
            [],
            "external",
            "slurmdbd at dbd.example:6819, not checked from here",
        ),
    ],
    ids=["no-ref", "missing", "no-pod", "pod-not-ready", "pod-ready", "ready-false", "external"],
)
def test_accounting_status(
    controller: dict[str, Any], accounting: dict[str, Any] | None, pods: list[bool], state: str, detail: str
) -> None:
    got = cli.accounting_status(controller, accounting, [slurmdbd_row(r) for r in pods])
    assert (got["state"], got["detail"]) == (state, detail)


# ------------------------------------------------------------------------------------------ slurm_target
async def target(controller: dict[str, Any], settings: Settings, objects: dict[str, Any] | None = None) -> Any:
    kube = FakeApi(world() if objects is None else objects).client()
    try:
        return await cli.slurm_target(kube, controller, settings)
    finally:
        await kube.aclose()


async def test_an_external_controller_is_reached_at_its_annotation_then_the_operator_url_then_slurm_rest_url(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    annotated = copy.deepcopy(EXTERNAL)
    annotated["metadata"]["annotations"] = {"slinky.slurm.net/slurmrestd-url": "http://annotated:6820"}
    assert (await target(annotated, stack_settings())).url == "http://annotated:6820"
    assert (await target(EXTERNAL, stack_settings())) == cli.SlurmTarget("http://rest.external:6820", EXTERNAL_KEY)
    monkeypatch.setenv("SLURM_REST_URL", "http://from-env:18820")
    assert (await target(EXTERNAL, Settings())).url == "http://from-env:18820"
    monkeypatch.setenv("SLINKY_OPERATOR__REST_URL", "http://operator-env:6820")
    assert (await target(EXTERNAL, Settings())).url == "http://operator-env:6820"


async def test_a_managed_controller_is_reached_at_its_oldest_restapi() -> None:
    dns = await target(MANAGED, Settings(operator={"service_addresses": "dns"}))
    assert dns == cli.SlurmTarget("http://slurm-restapi.team-a:6820", JWT_KEY)
    by_endpoints = await target(MANAGED, Settings(operator={"service_addresses": "endpoints"}))
    assert by_endpoints.url == "http://10.0.0.7:6820"


def test_the_service_addresses_setting_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLINKY_OPERATOR__SERVICE_ADDRESSES", "endpoints")
    assert Settings().operator.service_addresses == "endpoints"


def without(path: str, **replace: Any) -> dict[str, Any]:
    objects = world()
    objects[path] = replace.get("items", [])
    return objects


@pytest.mark.parametrize(
    ("controller", "objects", "reason"),
    [
        (
            MANAGED,
            without(f"{API}/namespaces/team-a/restapis", items=[OTHER_RESTAPI]),
            "no RestApi names Controller team-a/slurm (a managed cluster is reached by its slurmrestd)",
        ),
        (
            MANAGED,
            without("/api/v1/namespaces/team-a/endpoints"),
            "RestApi team-a/slurm has no ready slurmrestd pod (Endpoints slurm-restapi)",
        ),
        (
            MANAGED,
            without("/api/v1/namespaces/team-a/secrets"),
            "Secret team-a/slurm-auth-jwt (jwtKeyRef of slurm) does not exist",
        ),
        (
            MANAGED,
            without("/api/v1/namespaces/team-a/secrets", items=[secret("slurm-auth-jwt", "team-a", "other.key", b"k")]),
            "Secret team-a/slurm-auth-jwt has no key jwt.key",
        ),
        (
            {**EXTERNAL, "spec": {"external": True}},
            world(),
            "Controller slurm/slurm has no spec.jwtKeyRef to sign a token with",
        ),
    ],
    ids=["no-restapi", "no-ready-endpoint", "no-secret", "no-key", "no-jwt-key-ref"],
)
async def test_why_slurm_is_not_asked(controller: dict[str, Any], objects: dict[str, Any], reason: str) -> None:
    with pytest.raises(cli.SlurmNotAsked) as err:
        await target(controller, Settings(operator={"service_addresses": "endpoints"}), objects)
    assert str(err.value) == reason


async def test_a_deleted_restapi_is_not_the_one_asked() -> None:
    leaving = copy.deepcopy(RESTAPI)
    leaving["metadata"]["deletionTimestamp"] = "2026-11-25T18:59:00Z"
    objects = without(f"{API}/namespaces/team-a/restapis", items=[leaving, YOUNGER_RESTAPI])
    got = await target(MANAGED, Settings(operator={"service_addresses": "dns"}), objects)
    assert got.url == "http://slurm-b-restapi.team-a:6820"


# ------------------------------------------------------------------------------------------ arguments
def test_arguments_of_each_command() -> None:
    args = parse("list", "-A", "-o", "json")
    assert (args.all_namespaces, args.namespace, args.output, args.handler is not None) == (True, None, "json", True)
    args = parse("list", "-n", "team-a")
    assert (args.all_namespaces, args.namespace, args.output) == (False, "team-a", "table")
    args = parse("show", "slurm", "-n", "team-a")
    assert (args.name, args.namespace, args.output) == ("slurm", "team-a", "table")


@pytest.mark.parametrize(
    "argv",
    [("list", "-n", "a", "-A"), ("show",), ("list", "-o", "yaml"), ()],
    ids=["namespace-and-all", "show-without-name", "unknown-output", "no-command"],
)
def test_bad_arguments_are_refused_by_the_parser(argv: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        parse(*argv)
    assert exit_.value.code == 2 and "usage: slinky clusters" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "settings", "path"),
    [
        (["list", "-A"], Settings(), f"{API}/controllers"),
        (["list", "-n", "slurm"], Settings(), f"{API}/namespaces/slurm/controllers"),
        (["list"], Settings(), f"{API}/namespaces/default/controllers"),
        (["list"], Settings(operator={"namespaces": ["team-a"]}), f"{API}/namespaces/team-a/controllers"),
        (["list"], Settings(operator={"namespaces": ["a", "b"]}), f"{API}/namespaces/default/controllers"),
        (
            ["show", "slurm"],
            Settings(operator={"namespaces": ["team-a"]}),
            f"{API}/namespaces/team-a/controllers/slurm",
        ),
    ],
    ids=["all", "namespace", "default", "the-operators-one", "several-watched", "show-default"],
)
async def test_which_namespace_is_read(
    argv: list[str], settings: Settings, path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    src, api, _ = sources(settings=settings)
    await run(argv, src)
    assert api.paths[0] == path


async def test_a_namespace_with_no_controllers(capsys: pytest.CaptureFixture[str]) -> None:
    src, _, _ = sources()
    assert await run(["list", "-n", "empty"], src) == 0
    assert capsys.readouterr().out == "No Controllers found in namespace empty.\n"


# ------------------------------------------------------------------------------------------ command line
def slinky(*argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLINKY_", "TEMPORAL_", "KUBECONFIG", "SLURM_"))}
    return subprocess.run(
        [sys.executable, "-m", "slinky.cli", "clusters", *argv],
        cwd=REPO,
        env={**base, **env},
        text=True,
        capture_output=True,
        timeout=30,
    )


def test_an_unreachable_api_server_from_the_command_line(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\ncurrent-context: c\n"
        "clusters: [{name: k, cluster: {server: 'http://127.0.0.1:1'}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\nusers: [{name: u, user: {}}]\n"
    )
    proc = slinky("list", "-A", KUBECONFIG=str(kubeconfig))
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.startswith("error: Kubernetes: GET /apis/slinky.slurm.net/v1beta1/controllers")
    assert proc.stderr.count("\n") == 1
    missing = slinky("show", "x", KUBECONFIG=str(tmp_path / "nope"))
    assert missing.returncode == 1 and missing.stderr.startswith("error: Kubernetes: cannot load the kubeconfig")


def test_clusters_is_an_area_of_the_slinky_command() -> None:
    assert parse("list").command is cli.list_command
    assert "the operator's Slurm clusters" in build_parser().format_help()
