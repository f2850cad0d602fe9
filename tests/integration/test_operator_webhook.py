"""The operator's validating webhook (workers.operator.webhook) on the real API server: what `kubectl apply` and
`kubectl patch` print for each rule, and that deletions and status writes never wait for it.

It runs as its own process on the stack's webhook certificate, registered for one namespace of its own (a
namespace selector), so no other test's objects meet it: other tests create bad objects on purpose to see the
operator's conditions.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config

from slinky.dev import stack
from slinky.dev import webhook as dev_webhook
from slinky.operator import admission

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
PORT = 16446
GOOD_NODESET = {"controllerRef": {"name": "slurm"}, "slurmd": {"image": "slurmd:26.05"}, "replicas": 0}


def kubectl(env: dict[str, str], ns: str, *args: str, body: Any = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["kubectl", "--kubeconfig", env["KUBECONFIG"], "-n", ns, *args],
        input=None if body is None else yaml.safe_dump(body),
        capture_output=True,
        text=True,
        timeout=60,
    )


def cr(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "slinky.slurm.net/v1beta1", "kind": kind, "metadata": {"name": name}, "spec": spec}


@pytest.fixture(scope="module")
def guarded(dev_env: dict[str, str]) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A namespace guarded by a fresh operator webhook process; afterwards the registration, the process and the
    namespace are gone."""
    ns = f"wh-op-{uuid.uuid4().hex[:6]}"
    ca, cert, key = dev_webhook.ensure_certs(stack.STATE)
    api = config.new_client_from_config(config_file=dev_env["KUBECONFIG"])
    core, reg = client.CoreV1Api(api), client.AdmissionregistrationV1Api(api)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns, labels={"slinky-webhook-test": ns})))
    log = open(stack.STATE / "logs" / f"operator-webhook-{ns}.log", "ab")
    proc = subprocess.Popen(
        [sys.executable, "-m", "workers.operator.webhook", "--cert", str(cert), "--key", str(key), "--port", str(PORT)],
        cwd=REPO,
        env={**os.environ, **dev_env, "PATH": os.environ["PATH"]},
        stdout=log,
        stderr=log,
    )
    name = f"{ns}.{admission.WEBHOOK_NAME}"
    body = admission.webhook_configuration(
        name,
        {
            "url": f"https://127.0.0.1:{PORT}/validate",
            "caBundle": __import__("base64").b64encode(ca.read_bytes()).decode(),
        },
        namespace_selector={"matchLabels": {"slinky-webhook-test": ns}},
    )
    try:
        deadline = time.monotonic() + 20
        while not dev_webhook.healthy(ca, PORT) and time.monotonic() < deadline:
            time.sleep(0.2)
        reg.create_validating_webhook_configuration(body)
        yield ns, proc
    finally:
        reg.delete_validating_webhook_configuration(name)
        proc.terminate()
        proc.wait(10)
        log.close()
        core.delete_namespace(ns)


def denied(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode != 0, proc.stdout
    assert f'admission webhook "{admission.WEBHOOK_NAME}" denied the request' in proc.stderr, proc.stderr
    return proc.stderr


KEYS = {"slurmKeyRef": {"name": "k", "key": "slurm.key"}, "jwtKeyRef": {"name": "k", "key": "jwt.key"}}
SCHEDULED = {"type": "ScheduledUpdate", "scheduledUpdate": {"startTime": "2026-12-01T00:00:00Z", "duration": "30s"}}
BAD = [
    ("NodeSet", {**GOOD_NODESET, "updateStrategy": {"rollingUpdate": {"maxUnavailable": 0}}}, "must not be 0"),
    ("NodeSet", {**GOOD_NODESET, "updateStrategy": SCHEDULED}, "scheduledUpdate.duration must be at least 1m"),
    ("Controller", {**KEYS, "extraConf": "MaxJobCount=1\nnot slurm"}, "line 2 is not Slurm configuration"),
    ("Accounting", {**KEYS, "storageConfig": {"username": "slurm"}}, "spec.storageConfig.host"),
    ("Controller", {**KEYS, "ha": {"enabled": True}}, "high availability (HA) mode requires"),
    ("Token", {"jwtKeyRef": KEYS["jwtKeyRef"], "username": "slurm", "lifetime": "ten minutes"}, "spec.lifetime"),
]


@pytest.mark.parametrize(("kind", "spec", "words"), BAD)
def test_kubectl_apply_of_a_bad_object_is_denied_naming_the_field(
    dev_env: dict[str, str], guarded: tuple[str, Any], kind: str, spec: dict[str, Any], words: str
) -> None:
    ns, _ = guarded
    err = denied(kubectl(dev_env, ns, "apply", "-f", "-", body=cr(kind, "bad", spec)))
    assert f"{kind} {ns}/bad: " in err and words in err, err
    assert kubectl(dev_env, ns, "get", kind.lower(), "bad").returncode != 0, "nothing was made"


def test_kubectl_patch_is_judged_too_and_a_spec_keeping_write_and_a_delete_pass(
    dev_env: dict[str, str], guarded: tuple[str, subprocess.Popen[bytes]]
) -> None:
    ns, proc = guarded
    assert kubectl(dev_env, ns, "apply", "-f", "-", body=cr("NodeSet", "good", GOOD_NODESET)).returncode == 0
    err = denied(
        kubectl(
            dev_env,
            ns,
            "patch",
            "nodeset",
            "good",
            "--type=merge",
            "-p",
            json.dumps({"spec": {"controllerRef": {"name": "other"}}}),
        )
    )
    assert "spec.controllerRef is immutable" in err
    zero = {"spec": {"updateStrategy": {"rollingUpdate": {"maxUnavailable": "0%"}}}}
    assert "maxUnavailable must not be 0" in denied(
        kubectl(dev_env, ns, "patch", "nodeset", "good", "--type=merge", "-p", json.dumps(zero))
    )
    assert kubectl(dev_env, ns, "label", "nodeset", "good", "team=a").returncode == 0, "the spec is kept: allowed"
    assert kubectl(dev_env, ns, "scale", "nodeset", "good", "--replicas=1").returncode == 0, "the scale subresource"
    # With the webhook down, a deletion (a namespace's too) does not wait for it: DELETE is not in its rules.
    proc.terminate()
    proc.wait(10)
    assert kubectl(dev_env, ns, "delete", "nodeset", "good", "--wait=true", "--timeout=30s").returncode == 0
    down = kubectl(dev_env, ns, "apply", "-f", "-", body=cr("NodeSet", "later", GOOD_NODESET))
    assert down.returncode != 0 and "failed calling webhook" in down.stderr, "Fail: nothing slips in while it is down"
