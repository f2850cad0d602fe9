"""What the dev stack's apiserver stores for values in custom resources, as a real Kubernetes 1.20 does (issue 17).

The apiserver is built from Debian's v1.20.2 source with Go 1.19, and that build once refused every `""` in a
custom resource (deploy/dev/build-kubernetes.sh, fix 2). These tests apply objects the way users do, with
`kubectl apply`, and read them back: empty strings, nulls, empty lists and maps, integers written as floats,
and the server-side defaults (upstream's `default: ""` included). docs/dev-stack.md lists what was checked.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from slinky.dev import real_nodes, stack
from slinky.operator.api.accounting import Accounting
from slinky.operator.api.controller import Controller
from slinky.operator.api.loginset import LoginSet
from slinky.operator.api.nodeset import NodeSet
from slinky.operator.api.restapi import RestApi
from slinky.operator.api.token import Token
from slinky.operator.validation import nodeset_problems
from tests.integration.cluster import Kube
from tests.integration.operator_fixtures import end_workflows_of, start_operator, stop_operator, wait_for

pytestmark = pytest.mark.integration

GROUP, VERSION = "slinky.slurm.net", "v1beta1"
GROUP_VERSION = f"{GROUP}/{VERSION}"
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "operator" / "upstream-chart-render.yaml"
PLURAL = {
    "Accounting": "accountings",
    "Controller": "controllers",
    "LoginSet": "loginsets",
    "NodeSet": "nodesets",
    "RestApi": "restapis",
    "Token": "tokens",
    "PodGroup": "podgroups.scheduling.x-k8s.io",
    "Secret": "secrets",
}


def kubectl(env: dict[str, str], ns: str, *args: str, body: Any = None, check: bool = True) -> str:
    stdin = None if body is None else (body if isinstance(body, str) else yaml.safe_dump_all(body))
    proc = subprocess.run(
        ["kubectl", "-n", ns, *args],
        input=stdin,
        env={**os.environ, "KUBECONFIG": env["KUBECONFIG"]},
        capture_output=True,
        text=True,
        timeout=60,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout if proc.returncode == 0 else proc.stderr


def get(env: dict[str, str], ns: str, kind: str, name: str) -> dict[str, Any]:
    obj: dict[str, Any] = json.loads(kubectl(env, ns, "get", PLURAL[kind], name, "-o", "json"))
    return obj


def cr(kind: str, name: str, spec: dict[str, Any], **meta: Any) -> dict[str, Any]:
    return {"apiVersion": GROUP_VERSION, "kind": kind, "metadata": {"name": name, **meta}, "spec": spec}


def test_empty_strings_are_stored_and_returned_in_every_kind(dev_env: dict[str, str], ns: str) -> None:
    """The defect: `spec.extraConf: Invalid value: "null"` for `extraConf: ""`. A real 1.20 keeps `""`."""
    controller = cr(
        "Controller",
        "t3",
        {
            "slurmKeyRef": {"name": "k", "key": "slurm.key"},
            "extraConf": "",
            "clusterName": "",
            "persistence": {"existingClaim": "", "storageClassName": ""},
            "slurmctld": {"image": "", "args": [""]},
            "template": {"spec": {"priorityClassName": ""}},
        },
    )
    nodeset = cr(
        "NodeSet",
        "t3",
        {
            "controllerRef": {"name": "t3"},
            "extraConf": "",
            "partition": {"enabled": False},
            "slurmd": {"image": "slurmd:26.05", "env": [{"name": "E", "value": ""}]},
            "template": {"spec": {"hostname": ""}},
        },
    )
    podgroup = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "t3", "annotations": {"empty": ""}, "labels": {"empty": ""}},
        "spec": {"minMember": 2, "queue": ""},
    }
    kubectl(dev_env, ns, "apply", "-f", "-", body=[controller, nodeset, podgroup])

    c = get(dev_env, ns, "Controller", "t3")["spec"]
    assert c["extraConf"] == "" and c["clusterName"] == ""
    assert c["persistence"]["existingClaim"] == "" and c["persistence"]["storageClassName"] == ""
    assert c["slurmctld"] == {"image": "", "args": [""]} and c["template"]["spec"]["priorityClassName"] == ""
    n = get(dev_env, ns, "NodeSet", "t3")["spec"]
    assert n["extraConf"] == "" and n["template"]["spec"]["hostname"] == ""
    assert n["slurmd"]["env"] == [{"name": "E", "value": ""}]
    pg = get(dev_env, ns, "PodGroup", "t3")
    assert pg["metadata"]["annotations"]["empty"] == "" and pg["metadata"]["labels"]["empty"] == ""
    assert pg["spec"] == {"minMember": 2, "queue": ""}

    # kubectl create and a second apply (a three-way merge against the stored object) take them too.
    kubectl(dev_env, ns, "create", "-f", "-", body=[cr("Controller", "t4", {"extraConf": ""})])
    assert get(dev_env, ns, "Controller", "t4")["spec"]["extraConf"] == ""
    controller["spec"]["extraConf"] = "MaxJobCount=10"
    kubectl(dev_env, ns, "apply", "-f", "-", body=[controller])
    controller["spec"]["extraConf"] = ""
    kubectl(dev_env, ns, "apply", "-f", "-", body=[controller])
    assert get(dev_env, ns, "Controller", "t3")["spec"]["extraConf"] == ""


@pytest.mark.parametrize(
    ("kind", "spec", "words"),
    [
        ("Controller", {"extraConf": 5}, ("spec.extraConf", "string")),
        ("NodeSet", {"controllerRef": {"name": "c"}, "replicas": ""}, ("spec.replicas", "integer")),
        ("NodeSet", {"controllerRef": {"name": "c"}, "replicas": 1.5}, ("spec.replicas", "integer")),
        # upstream's own pattern `^[^\n]+$` refuses an empty partition config, on a real 1.20 as here
        ("NodeSet", {"controllerRef": {"name": "c"}, "partition": {"config": ""}}, ("spec.partition.config", "match")),
    ],
)
def test_types_are_still_checked(
    dev_env: dict[str, str], ns: str, kind: str, spec: dict[str, Any], words: tuple[str, str]
) -> None:
    """The fix makes `""` a string again; it must not make the type check pass everything."""
    refused = kubectl(dev_env, ns, "apply", "-f", "-", body=[cr(kind, "bad", spec)], check=False)
    assert all(w in refused for w in words), refused


def test_nulls_empty_lists_maps_numbers_and_defaults(kube: Kube, dev_env: dict[str, str], ns: str) -> None:
    """As the 1.20 apiextensions server does, for a body sent as is (kubectl drops nulls itself): a null in a
    typed field without `nullable` is pruned, then defaulted if it has a default; nulls inside free-form
    objects stay; empty lists and maps stay; an integral float is an integer, except where the scale
    subresource reads `.spec.replicas` (NestedInt64: a real 1.20 refuses `2.0` there too); a reference's
    `name` defaults to `""` (upstream's `default: ""`)."""
    api = client.CustomObjectsApi(kube.api)
    body = cr(
        "NodeSet",
        "n1",
        {
            "controllerRef": {},
            "ordinalPadding": 2.0,
            "extraConf": None,
            "workloadDisruptionProtection": None,
            "slurmd": {"image": "slurmd:26.05", "args": [], "resources": {}, "env": None},
            "template": {"metadata": {}, "spec": {"imagePullSecrets": None, "tolerations": [], "nodeSelector": {}}},
            "updateStrategy": {"rollingUpdate": {"maxUnavailable": "25%"}},
        },
    )
    spec = api.create_namespaced_custom_object(GROUP, VERSION, ns, "nodesets", body)["spec"]
    assert spec["controllerRef"] == {"name": ""}, "default: '' on a reference's name"
    assert spec["ordinalPadding"] == 2 and isinstance(spec["ordinalPadding"], int)
    assert "extraConf" not in spec, "a null in a typed field without a default is pruned"
    assert spec["workloadDisruptionProtection"] is True, "a null in a field with a default is defaulted"
    assert spec["slurmd"] == {"image": "slurmd:26.05", "args": [], "resources": {}, "env": None}
    assert spec["template"] == {
        "metadata": {},
        "spec": {"imagePullSecrets": None, "tolerations": [], "nodeSelector": {}},
    }
    assert spec["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%"}}
    assert spec["scalingMode"] == "StatefulSet" and spec["replicas"] == 1

    for value, field in ((2.5, "ordinalPadding"), (2.0, "replicas")):
        bad = cr("NodeSet", "n2", {"controllerRef": {"name": "c"}, field: value})
        with pytest.raises(ApiException) as refused:
            api.create_namespaced_custom_object(GROUP, VERSION, ns, "nodesets", bad)
        assert refused.value.status == 422 and f"spec.{field}" in str(refused.value.body)
    with pytest.raises(ApiException) as refused:
        api.create_namespaced_custom_object(
            GROUP, VERSION, ns, "nodesets", cr("NodeSet", "n3", {"controllerRef": None})
        )
    assert "spec.controllerRef: Required value" in str(refused.value.body), "pruned, then required"

    token = cr("Token", "t1", {"username": "slurm", "jwtKeyRef": {"key": "jwt.key"}, "secretRef": {"key": ""}})
    spec = api.create_namespaced_custom_object(GROUP, VERSION, ns, "tokens", token)["spec"]
    assert spec["jwtKeyRef"] == {"key": "jwt.key", "name": ""} and spec["secretRef"] == {"key": "", "name": ""}

    # kubectl apply drops nulls on the client, and sends `replicas: 2.0` of a YAML file as 2.
    sent = cr("NodeSet", "n4", {"controllerRef": {"name": "c"}, "replicas": 2.0, "extraConf": None})
    kubectl(dev_env, ns, "apply", "-f", "-", body=[sent])
    stored = api.get_namespaced_custom_object(GROUP, VERSION, ns, "nodesets", "n4")["spec"]
    assert stored["replicas"] == 2 and "extraConf" not in stored


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def _contains(stored: Any, sent: Any, path: str = "") -> list[str]:
    """Where `sent` is not kept in `stored` (extra keys in `stored`, the server's defaults, are fine)."""
    if isinstance(sent, dict):
        if not isinstance(stored, dict):
            return [path]
        return [p for k, v in sent.items() for p in _contains(stored.get(k), v, f"{path}.{k}")]
    if isinstance(sent, list):
        if not isinstance(stored, list) or len(stored) != len(sent):
            return [path]
        return [p for i, v in enumerate(sent) for p in _contains(stored[i], v, f"{path}[{i}]")]
    return [] if stored == sent else [f"{path}: sent {sent!r}, stored {stored!r}"]


CHART_DB_USER = "slurm"
"""The chart render's database account (`storageConfig.username`, its password Secret holds "")."""


@contextlib.contextmanager
def chart_database(kube: Kube, ns: str) -> Iterator[None]:
    """What the chart's values assume beside the chart: a database at `mariadb:3306` with user `slurm` (empty
    password). Here a Service `mariadb` without selector whose Endpoints are the stack's MariaDB, and that user,
    granted `slurm_acct_db` only; afterwards the user and this cluster's accounting tables are gone."""
    for obj in real_nodes.host_service(ns, "mariadb", 3306, stack.PORTS.mariadb):
        if obj["kind"] == "Service":
            kube.core.create_namespaced_service(ns, obj)
        else:
            kube.core.create_namespaced_endpoints(ns, obj)
    user = f"'{CHART_DB_USER}'@'%'"
    grant = f"CREATE USER IF NOT EXISTS {user}; ALTER USER {user} IDENTIFIED BY ''; "
    grant += f"GRANT ALL PRIVILEGES ON slurm_acct_db.* TO {user};"
    assert stack._mariadb_root(grant).returncode == 0
    try:
        yield
    finally:
        cluster = f"{ns}_slurm"
        listed = stack._mariadb_root(f"SHOW TABLES FROM slurm_acct_db LIKE '{cluster.replace('_', chr(92) + '_')}%';")
        tables = [t for t in listed.stdout.splitlines()[1:] if t]
        drops = "".join(f"DROP TABLE IF EXISTS slurm_acct_db.`{t}`; " for t in tables)
        stack._mariadb_root(
            f"{drops}DELETE FROM slurm_acct_db.cluster_table WHERE name = '{cluster}'; DROP USER IF EXISTS {user};"
        )


def _in_pod(dev_env: dict[str, str], ns: str, target: str, *command: str) -> str:
    return kubectl(dev_env, ns, "exec", target, "--", *command, check=False)


@pytest.mark.timeout(420)
def test_upstream_chart_render_applies_unchanged_and_runs_a_job(
    dev_env: dict[str, str], kube: Kube, ns: str, tmp_path: Path
) -> None:
    """Upstream's `slurm` chart output, applied unchanged in a namespace whose pods go to the real nodes, with the
    database its values name: every object is stored as sent and taken by the operator, the NodeSet's node is IDLE
    in `sinfo` from the login pod, and a batch job ends COMPLETED and is in `sacct`."""
    kube.core.patch_namespace(
        ns, {"metadata": {"annotations": real_nodes.namespace_annotations(stack.REAL_NODE_TAINT)}}
    )
    docs = [d for d in yaml.safe_load_all(FIXTURE.read_text()) if d]
    kubectl(dev_env, ns, "apply", "-f", str(FIXTURE))
    models = {
        "Accounting": Accounting,
        "Controller": Controller,
        "LoginSet": LoginSet,
        "NodeSet": NodeSet,
        "RestApi": RestApi,
        "Token": Token,
    }
    for doc in docs:
        stored = get(dev_env, ns, doc["kind"], doc["metadata"]["name"])
        if doc["kind"] == "Secret":
            continue
        typed_nulls_pruned = {**doc, "spec": _without_nulls(doc["spec"])}
        # Nulls inside free-form objects (a pod template) are kept as written; compare the rest.
        assert _contains(_without_nulls(stored), _without_nulls(typed_nulls_pruned)) == [], doc["kind"]
        model = models[doc["kind"]].model_validate(stored)
        assert model.metadata["name"] == doc["metadata"]["name"]
    controller = get(dev_env, ns, "Controller", "slurm")["spec"]
    assert controller["persistence"]["existingClaim"] == "" and "configFileRefs" not in controller
    assert "imagePullSecrets" not in controller["template"]["spec"], "kubectl apply sends no nulls"
    nodeset = NodeSet.model_validate(get(dev_env, ns, "NodeSet", "slurm-worker-slinky"))
    assert nodeset_problems(nodeset) == [], "the operator reconciles the chart's NodeSet as it is"
    # The operator takes every object as it is: a managed cluster is made, and what is not built is named.
    with chart_database(kube, ns):
        _operate_the_chart(dev_env, kube, ns, tmp_path)


def _operate_the_chart(dev_env: dict[str, str], kube: Kube, ns: str, tmp_path: Path) -> None:
    proc = start_operator(
        dev_env,
        tmp_path / "operator.log",
        SLINKY_OPERATOR__NAMESPACES=json.dumps([ns]),
        SLINKY_OPERATOR__TASK_QUEUE=f"chart-{ns}",
    )
    try:

        def conditions(kind: str, name: str) -> dict[str, dict[str, Any]]:
            status = get(dev_env, ns, kind, name).get("status") or {}
            return {c["type"]: c for c in status.get("conditions") or []}

        ctl = wait_for(
            lambda: (c := conditions("Controller", "slurm")).get("FieldsSupported") and c,
            60,
            "the chart's Controller reconciled",
        )
        assert ctl["ConfigValid"]["status"] == "True", ctl["ConfigValid"]
        assert ctl["FieldsSupported"]["status"] == "True", "ha and metrics are off in the chart's values"
        cm = json.loads(kubectl(dev_env, ns, "get", "configmap", "slurm-config", "-o", "json"))
        assert "PartitionName=all Nodes=ALL Default=YES MaxTime=UNLIMITED" in cm["data"]["slurm.conf"]
        assert f"ClusterName={ns}_slurm" in cm["data"]["slurm.conf"], "clusterName: '' means the default"
        login = wait_for(lambda: conditions("LoginSet", "slurm-login-slinky").get("FieldsSupported"), 60, "LoginSet")
        assert login["status"] == "True", "empty ssh fields are not set"
        nodeset = wait_for(lambda: conditions("NodeSet", "slurm-worker-slinky").get("SpecValid"), 60, "NodeSet")
        assert nodeset["status"] == "True"
        wait_for(
            lambda: conditions("Accounting", "slurm").get("Ready", {}).get("status") == "True",
            240,
            "Accounting Ready (slurmdbd on the stack's MariaDB as `mariadb:3306`)",
        )
        login = "deploy/slurm-login-slinky"
        wait_for(
            lambda: "idle" in _in_pod(dev_env, ns, login, "sinfo", "-h", "-N", "-n", "slinky-0", "-o", "%t"),
            240,
            "the NodeSet's node slinky-0 idle in sinfo from the login pod",
        )
        job = _in_pod(dev_env, ns, login, "sbatch", "--parsable", "--chdir=/tmp", "--wrap", "hostname").strip()
        assert job.isdigit(), job
        wait_for(
            lambda: "COMPLETED" in _in_pod(dev_env, ns, login, "sacct", "-X", "-n", "-j", job, "-o", "State"),
            90,
            f"job {job} COMPLETED in sacct",
        )
    finally:
        # The Controller first: a NodeSet deleted before it would start one more reconfigure.
        for kind in ("controllers", "nodesets", "loginsets", "restapis", "accountings"):
            kubectl(dev_env, ns, "delete", kind, "--all", "--wait=false", check=False)
        wait_for(lambda: not kube.pods(ns), 90, "the cluster's pods gone")
        stop_operator(proc)
        end_workflows_of(dev_env, f"chart-{ns}")
