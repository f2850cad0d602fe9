"""The admission webhook, called by the real kube-apiserver, through ``kubectl apply``.

The webhook is started and registered through ``slinky.dev.webhook`` unless ``dev up`` already did.
When this test registers it, every webhook is restricted to namespaces labelled
``slinky.slurm.net/webhook-test`` so that other engineers' tests on the shared stack never see it; a
registration made by ``dev up`` (the full scope) is used as is. Managed namespaces are made by
labelling them ``slinky.slurm.net/managed=true`` (the dev stack's managed namespace selector).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from slinky import wellknown
from slinky.bridge import admission
from slinky.dev import stack, webhook
from slinky.dev.procs import ProcessTable

pytestmark = pytest.mark.integration

TEST_LABEL = wellknown.PREFIX_SLINKY + "webhook-test"
SCHED = wellknown.SCHEDULER_NAME
TOLERATION = admission.managed_node_toleration(SCHED)
BOB = ["--as", "bob", "--as-group", "system:masters"]
"""A user who is not the bridge (the dev stack's bridge runs as ``admin``, like kubectl)."""


class Kubectl:
    def __init__(self, env: dict[str, str]) -> None:
        self.kubeconfig = env["KUBECONFIG"]
        self.namespaces: list[str] = []

    def run(
        self, *args: str, stdin: Any = None, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            ["kubectl", "--kubeconfig", self.kubeconfig, *args],
            input=json.dumps(stdin) if stdin is not None else None,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: {proc.stderr}")
        return proc

    def apply(self, obj: dict[str, Any], *extra: str) -> subprocess.CompletedProcess[str]:
        return self.run("apply", "-f", "-", *extra, stdin=obj, check=False)

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        ns = ["-n", namespace] if namespace else []
        proc = self.run("get", kind, name, *ns, "-o", "json", check=False)
        if proc.returncode != 0:
            assert "NotFound" in proc.stderr, proc.stderr
            return None
        out: dict[str, Any] = json.loads(proc.stdout)
        return out

    def namespace(self, *, managed: bool) -> str:
        name = f"wh-{'m' if managed else 'u'}-{uuid.uuid4().hex[:8]}"
        labels = {TEST_LABEL: "true"}
        if managed:
            labels[webhook.LABEL_MANAGED] = "true"
        self.run(
            "apply",
            "-f",
            "-",
            stdin={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}},
        )
        self.namespaces.append(name)
        return name


def pod(
    namespace: str,
    name: str = "p",
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "containers": [{"name": "main", "image": "pause", "resources": {"requests": {"cpu": "100m"}}}],
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 0,
        **spec,
    }
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": body}


def _scoped_to_tests(config: dict[str, Any]) -> bool:
    return any(
        expr.get("key") == TEST_LABEL
        for hook in config.get("webhooks") or []
        for expr in (hook.get("namespaceSelector") or {}).get("matchExpressions") or []
    )


@pytest.fixture(scope="module")
def kubectl(dev_env: dict[str, str]) -> Iterator[Kubectl]:
    k = Kubectl(dev_env)
    procs = ProcessTable(stack.STATE / "pids")
    webhook.start(procs, stack.STATE)
    existing = k.get("mutatingwebhookconfigurations", admission.CONFIGURATION_NAME)
    if existing is None or _scoped_to_tests(existing):
        ca, _, _ = webhook.ensure_certs(stack.STATE)
        webhook.register(dev_env["KUBECONFIG"], ca, only_namespaces_labelled=TEST_LABEL)
        time.sleep(1.0)  # the API server picks up webhook configurations from its informer
    yield k
    for ns in k.namespaces:
        k.run("delete", "namespace", ns, "--wait=false", check=False)


@pytest.fixture(scope="module")
def managed(kubectl: Kubectl) -> str:
    return kubectl.namespace(managed=True)


@pytest.fixture(scope="module")
def unmanaged(kubectl: Kubectl) -> str:
    return kubectl.namespace(managed=False)


def _denied(proc: subprocess.CompletedProcess[str], message: str) -> None:
    assert proc.returncode != 0, f"expected a denial, got: {proc.stdout}"
    assert "denied the request" in proc.stderr, proc.stderr
    assert message in proc.stderr, proc.stderr


# ------------------------------------------------------------------------------------------ CREATE denials
DENIALS = [
    ("jobid-label", {"labels": {wellknown.LABEL_SLURM_JOB_ID: "42"}}, [admission.MSG_JOBID_LABEL_ON_CREATE]),
    (
        "node-annotation",
        {"annotations": {wellknown.ANNOTATION_SLURM_NODE: "n1"}},
        [admission.MSG_NODE_ANNOTATION_ON_CREATE],
    ),
    (
        "topology-spread",
        {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}]},
        [admission.MSG_TOPOLOGY_SPREAD],
    ),
    (
        "bad-annotation-value",
        {"annotations": {wellknown.ANNOTATION_EXCLUSIVE: "yes"}},
        [f'metadata.annotations[{wellknown.ANNOTATION_EXCLUSIVE}]: \'yes\' must be "true" or "false"'],
    ),
    (
        "unknown-annotation",
        {"annotations": {wellknown.PREFIX_SLURMJOB + "partiton": "x"}},
        [f"metadata.annotations[{wellknown.PREFIX_SLURMJOB}partiton]: not a known", wellknown.ANNOTATION_PARTITION],
    ),
    (
        "several-at-once",
        {"labels": {wellknown.LABEL_SLURM_JOB_ID: "1"}, "annotations": {wellknown.ANNOTATION_MIN_NODES: "0"}},
        [
            admission.MSG_JOBID_LABEL_ON_CREATE
            + f"; metadata.annotations[{wellknown.ANNOTATION_MIN_NODES}]: 0 is outside 1..2147483647"
        ],
    ),
]


@pytest.mark.parametrize(("case", "fields", "messages"), DENIALS, ids=[d[0] for d in DENIALS])
def test_create_denied_in_managed_namespace(
    kubectl: Kubectl, managed: str, case: str, fields: dict[str, Any], messages: list[str]
) -> None:
    proc = kubectl.apply(pod(managed, f"deny-{case}", **fields))
    for message in messages:
        _denied(proc, message)
    assert 'admission webhook "managed.pods.slinky.slurm.net"' in proc.stderr
    assert kubectl.get("pod", f"deny-{case}", managed) is None


def test_resource_claims_never_reach_the_webhook_on_1_20(kubectl: Kubectl, managed: str) -> None:
    """Kubernetes 1.20 drops ``spec.resourceClaims`` while decoding, before admission (unit-tested instead)."""
    proc = kubectl.apply(
        pod(managed, "claims", resourceClaims=[{"name": "gpu", "source": {"resourceClaimName": "g"}}]),
        "--validate=false",
    )
    if proc.returncode != 0:
        _denied(proc, admission.MSG_RESOURCE_CLAIMS)
        return
    created = kubectl.get("pod", "claims", managed)
    assert created is not None and "resourceClaims" not in created["spec"]
    kubectl.run("delete", "pod", "claims", "-n", managed, "--wait=false")


# ------------------------------------------------------------------------------------------ mutation
def test_managed_pod_gets_scheduler_and_toleration(kubectl: Kubectl, managed: str) -> None:
    proc = kubectl.apply(
        pod(managed, "mutated", nodeName="slinky-node-1", tolerations=[{"key": "a", "operator": "Exists"}])
    )
    assert proc.returncode == 0, proc.stderr
    created = kubectl.get("pod", "mutated", managed)
    assert created is not None
    spec = created["spec"]
    assert spec["schedulerName"] == SCHED
    assert TOLERATION in spec["tolerations"]
    assert {"key": "a", "operator": "Exists"} in spec["tolerations"]
    # nodeName was cleared on CREATE; only the bridge binds it (to a node Slurm picked), if it has by now.
    node = spec.get("nodeName")
    if node is not None:
        assert created["metadata"]["annotations"][wellknown.ANNOTATION_SLURM_NODE] == node
    kubectl.run("delete", "pod", "mutated", "-n", managed, "--wait=false")


def test_other_scheduler_outside_managed_namespaces_is_untouched(kubectl: Kubectl, unmanaged: str) -> None:
    proc = kubectl.apply(pod(unmanaged, "plain", labels={wellknown.LABEL_SLURM_JOB_ID: "7"}))
    assert proc.returncode == 0, proc.stderr
    created = kubectl.get("pod", "plain", unmanaged)
    assert created is not None
    assert created["spec"]["schedulerName"] == "default-scheduler"
    assert TOLERATION not in created["spec"].get("tolerations", [])
    kubectl.run("delete", "pod", "plain", "-n", unmanaged, "--wait=false")


# ------------------------------------------------------------------------------------------ #13
def test_our_scheduler_outside_managed_namespaces_is_validated(kubectl: Kubectl, unmanaged: str) -> None:
    bad = pod(unmanaged, "bypass", annotations={wellknown.ANNOTATION_TIMELIMIT: "1h"}, schedulerName=SCHED)
    proc = kubectl.apply(bad)
    _denied(proc, f"metadata.annotations[{wellknown.ANNOTATION_TIMELIMIT}]: '1h' is not a whole number")
    assert 'admission webhook "scheduler.pods.slinky.slurm.net"' in proc.stderr
    proc = kubectl.apply(
        pod(unmanaged, "bypass-label", labels={wellknown.LABEL_SLURM_JOB_ID: "7"}, schedulerName=SCHED)
    )
    _denied(proc, admission.MSG_JOBID_LABEL_ON_CREATE)


def test_kube_system_is_untouched(kubectl: Kubectl) -> None:
    ns = kubectl.get("namespace", "kube-system")
    assert ns is not None and ns["metadata"]["labels"][wellknown.LABEL_WEBHOOK] == wellknown.WEBHOOK_IGNORE
    name = f"wh-sys-{uuid.uuid4().hex[:6]}"
    body = pod("kube-system", name, labels={wellknown.LABEL_SLURM_JOB_ID: "7"}, schedulerName=SCHED)
    body["metadata"]["annotations"] = {wellknown.ANNOTATION_TIMELIMIT: "1h"}
    try:
        proc = kubectl.apply(body)
        assert proc.returncode == 0, proc.stderr
        created = kubectl.get("pod", name, "kube-system")
        assert created is not None
        assert "tolerations" not in created["spec"] or TOLERATION not in created["spec"]["tolerations"]
    finally:
        kubectl.run("delete", "pod", name, "-n", "kube-system", "--wait=false", check=False)


# ------------------------------------------------------------------------------------------ UPDATE
def test_update_of_reserved_keys_by_a_user_is_denied(kubectl: Kubectl, managed: str) -> None:
    assert kubectl.apply(pod(managed, "upd")).returncode == 0
    try:
        proc = kubectl.run(
            "label",
            "pod",
            "upd",
            "-n",
            managed,
            f"{wellknown.LABEL_SLURM_JOB_ID}=999999",
            "--overwrite",
            *BOB,
            check=False,
        )
        _denied(proc, admission.MSG_JOBID_LABEL_CHANGED)
        proc = kubectl.run(
            "annotate",
            "pod",
            "upd",
            "-n",
            managed,
            f"{wellknown.ANNOTATION_SLURM_NODE}=nowhere",
            "--overwrite",
            *BOB,
            check=False,
        )
        _denied(proc, admission.MSG_NODE_ANNOTATION_CHANGED)
        proc = kubectl.run(
            "annotate", "pod", "upd", "-n", managed, f"{wellknown.ANNOTATION_QOS}= ", "--overwrite", *BOB, check=False
        )
        _denied(proc, f"metadata.annotations[{wellknown.ANNOTATION_QOS}]: must not be empty")
        # Other changes by the same user are fine.
        kubectl.run("label", "pod", "upd", "-n", managed, "team=a", *BOB)
    finally:
        kubectl.run("delete", "pod", "upd", "-n", managed, "--wait=false", check=False)


# ------------------------------------------------------------------------------------------ outage (#189)
def _create_ok(kubectl: Kubectl, namespace: str, name: str, **spec: Any) -> None:
    proc = kubectl.apply(pod(namespace, name, **spec), "--request-timeout=60s")
    assert proc.returncode == 0, proc.stderr
    kubectl.run("delete", "pod", name, "-n", namespace, "--wait=false", check=False)


def test_webhook_down_blocks_only_managed_namespaces(kubectl: Kubectl, managed: str, unmanaged: str) -> None:
    procs = ProcessTable(stack.STATE / "pids")
    assert procs.stop(webhook.PROCESS)
    try:
        _create_ok(kubectl, "kube-system", f"wh-down-{uuid.uuid4().hex[:6]}")
        _create_ok(kubectl, unmanaged, "down-plain")
        _create_ok(kubectl, unmanaged, "down-ours", schedulerName=SCHED)  # fails open outside managed namespaces
        proc = kubectl.apply(pod(managed, "down-managed"))
        assert proc.returncode != 0 and "failed calling webhook" in proc.stderr, proc.stderr
    finally:
        webhook.start(procs, stack.STATE)
    _denied(
        kubectl.apply(pod(managed, "up-again", labels={wellknown.LABEL_SLURM_JOB_ID: "1"})),
        admission.MSG_JOBID_LABEL_ON_CREATE,
    )


def test_webhook_hung_times_out_and_fails_open_outside_managed_namespaces(kubectl: Kubectl, unmanaged: str) -> None:
    procs = ProcessTable(stack.STATE / "pids")
    pid = procs.running(webhook.PROCESS)
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        _create_ok(kubectl, "kube-system", f"wh-hung-{uuid.uuid4().hex[:6]}")
        assert time.monotonic() - started < 4, "kube-system must not wait for the webhook"
        _create_ok(kubectl, unmanaged, "hung-plain")
    finally:
        os.kill(pid, signal.SIGCONT)
    assert webhook.healthy(Path(stack.STATE / "webhook" / "ca.crt"))
