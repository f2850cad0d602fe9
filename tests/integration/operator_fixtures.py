"""The operator as a process of its own (`python -m workers.operator`), and a namespace with a Controller
that points at the stack's own Slurm (external mode, its JWT key in a Secret)."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.integration.cluster import Kube

REPO = Path(__file__).resolve().parents[2]
GROUP, VERSION = "slinky.slurm.net", "v1beta1"


@pytest.fixture(scope="module")
def operator(dev_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[subprocess.Popen[bytes]]:
    log = tmp_path_factory.mktemp("operator") / "operator.log"
    env = {**os.environ, **dev_env, "PATH": os.environ["PATH"], "SLINKY_OPERATOR__SCALE_IN_FALLBACK_SECONDS": "10"}
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "workers.operator"], cwd=REPO, env=env, stdout=out, stderr=out)
    yield proc
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()


def jwt_key(dev_env: dict[str, str]) -> bytes:
    from slinky.dev import stack

    return (stack.STATE / "slurm" / "root" / "etc" / "slurm" / "jwt_hs256.key").read_bytes()


@pytest.fixture
def cluster(kube: Kube, ns: str, dev_env: dict[str, str], operator: Any) -> str:
    """`ns` with Secret `slurm-jwt` and Controller `slurm` (external: the stack's slurmctld)."""
    from slinky.dev import stack

    kube.core.create_namespaced_secret(
        ns,
        client.V1Secret(
            metadata=client.V1ObjectMeta(name="slurm-jwt"),
            data={"jwt.key": base64.b64encode(jwt_key(dev_env)).decode()},
        ),
    )
    objects(kube).create_namespaced_custom_object(
        GROUP,
        VERSION,
        ns,
        "controllers",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Controller",
            "metadata": {"name": "slurm"},
            "spec": {
                "external": True,
                "externalConfig": {"host": stack.SLURM_CTL_HOST, "port": stack.PORTS.slurmctld},
                "jwtKeyRef": {"name": "slurm-jwt", "key": "jwt.key"},
            },
        },
    )
    return ns


def objects(kube: Kube) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(kube.api)


def apply_nodeset(kube: Kube, ns: str, name: str, **spec: Any) -> dict[str, Any]:
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "NodeSet",
        "metadata": {"name": name},
        "spec": {"controllerRef": {"name": "slurm"}, "slurmd": {"image": "slurmd:26.05"}, **spec},
    }
    return dict(objects(kube).create_namespaced_custom_object(GROUP, VERSION, ns, "nodesets", body))


def nodeset(kube: Kube, ns: str, name: str) -> dict[str, Any]:
    return dict(objects(kube).get_namespaced_custom_object(GROUP, VERSION, ns, "nodesets", name))


def scale(kube: Kube, ns: str, name: str, replicas: int) -> None:
    objects(kube).patch_namespaced_custom_object(GROUP, VERSION, ns, "nodesets", name, {"spec": {"replicas": replicas}})


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond["type"] == type_:
            return dict(cond)
    return {}


def wait_for(predicate: Any, timeout: float = 20.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")
        time.sleep(0.1)
