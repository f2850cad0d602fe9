"""The generated `slinky.slurm.net/v1beta1` CRDs on the real 1.20 apiserver (installed by `slinky dev up`)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from slinky.operator.api.crds import KINDS
from tests.integration.cluster import Kube

pytestmark = pytest.mark.integration

GROUP, VERSION = "slinky.slurm.net", "v1beta1"


@pytest.fixture
def objects(kube: Kube, ns: str) -> Iterator[client.CustomObjectsApi]:
    yield client.CustomObjectsApi(kube.api)


def nodeset(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "NodeSet",
        "metadata": {"name": name},
        "spec": {"controllerRef": {"name": "slurm"}, **spec},
    }


def test_every_crd_is_established(kube: Kube) -> None:
    ext = client.ApiextensionsV1Api(kube.api)
    for kind in KINDS:
        crd = ext.read_custom_resource_definition(kind.name)
        established = [c for c in crd.status.conditions if c.type == "Established"]
        assert established and established[0].status == "True", kind.name


def test_an_upstream_manifest_applies_with_server_side_defaults(
    objects: client.CustomObjectsApi, ns: str, dev_env: dict[str, str]
) -> None:
    body = nodeset(
        "slinky",
        replicas=2,
        slurmd={"image": "ghcr.io/slinkyproject/slurmd:26.05-ubuntu26.04", "resources": {"limits": {"cpu": 1}}},
        partition={"enabled": True, "config": "MaxTime=UNLIMITED"},
        updateStrategy={"rollingUpdate": {"maxUnavailable": 1}},
        template={"metadata": {"labels": {"team": "hpc"}}, "spec": {"nodeSelector": {"kubernetes.io/os": "linux"}}},
    )
    made = objects.create_namespaced_custom_object(GROUP, VERSION, ns, "nodesets", body)
    spec = made["spec"]
    assert spec["scalingMode"] == "StatefulSet" and spec["updateStrategy"]["type"] == "RollingUpdate"
    assert spec["workloadDisruptionProtection"] is True and spec["pruneSlurmNodeRecords"] == "Never"
    assert spec["slurmd"]["resources"] == {"limits": {"cpu": 1}}, "embedded objects are kept as written"
    assert spec["template"]["spec"] == {"nodeSelector": {"kubernetes.io/os": "linux"}}

    # The scale subresource (HPA, KEDA, kubectl scale) reads .status.selector and writes .spec.replicas.
    objects.patch_namespaced_custom_object_status(
        GROUP, VERSION, ns, "nodesets", "slinky", {"status": {"replicas": 2, "selector": "app=slurmd"}}
    )
    scale = objects.get_namespaced_custom_object_scale(GROUP, VERSION, ns, "nodesets", "slinky")
    assert scale["spec"]["replicas"] == 2 and scale["status"] == {"replicas": 2, "selector": "app=slurmd"}
    subprocess.run(
        ["kubectl", "-n", ns, "scale", "nss/slinky", "--replicas=5"],
        env={**os.environ, "KUBECONFIG": dev_env["KUBECONFIG"]},
        check=True,
        capture_output=True,
    )
    assert objects.get_namespaced_custom_object(GROUP, VERSION, ns, "nodesets", "slinky")["spec"]["replicas"] == 5

    wide = (
        subprocess.run(
            ["kubectl", "-n", ns, "get", "slurmd", "-o", "wide"],
            env={**os.environ, "KUBECONFIG": dev_env["KUBECONFIG"]},
            check=True,
            capture_output=True,
            text=True,
        )
        .stdout.split("\n")[0]
        .split()
    )
    assert wide == ["NAME", "DESIRED", "REPLICAS", "UPDATED", "READY", "IDLE", "ALLOCATED", "DOWN", "DRAIN", "AGE"]


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"partition": {"enabled": True, "config": "MaxTime=1\nNodeName=evil"}}, "spec.partition.config"),
        ({"replicas": -1}, "spec.replicas"),
        ({"scalingMode": "ReplicaSet"}, "spec.scalingMode"),
        ({"updateStrategy": {"type": "Recreate"}}, "spec.updateStrategy.type"),
    ],
    ids=["newline-in-partition-config", "negative-replicas", "unknown-scaling-mode", "unknown-update-strategy"],
)
def test_bad_input_is_denied_naming_the_field(
    objects: client.CustomObjectsApi, ns: str, spec: dict[str, Any], field: str
) -> None:
    with pytest.raises(ApiException) as err:
        objects.create_namespaced_custom_object(GROUP, VERSION, ns, "nodesets", nodeset("bad", **spec))
    assert err.value.status == 422
    assert field in err.value.body


def test_token_and_controller_apply(objects: client.CustomObjectsApi, ns: str) -> None:
    token = yaml.safe_load(
        """
        apiVersion: slinky.slurm.net/v1beta1
        kind: Token
        metadata: {name: bridge}
        spec: {username: slurm, jwtKeyRef: {name: slurm-jwt, key: jwt.key}, lifetime: 1h}
        """
    )
    made = objects.create_namespaced_custom_object(GROUP, VERSION, ns, "tokens", token)
    assert made["spec"]["refresh"] is True
    controller = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Controller",
        "metadata": {"name": "slurm"},
        "spec": {"external": True, "externalConfig": {"host": "127.0.0.1", "port": 6817}},
    }
    made = objects.create_namespaced_custom_object(GROUP, VERSION, ns, "controllers", controller)
    assert made["spec"]["inplaceReconfigure"] is False, "scalar defaults are applied by the apiserver"
    with pytest.raises(ApiException) as err:
        bad = {**controller, "metadata": {"name": "bad"}, "spec": {"external": True, "externalConfig": {"port": 1}}}
        objects.create_namespaced_custom_object(GROUP, VERSION, ns, "controllers", bad)
    assert err.value.status == 422 and "spec.externalConfig.host" in err.value.body
