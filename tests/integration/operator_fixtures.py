"""Helpers of the operator's integration tests (their fixtures, `operator` and `cluster`, are in conftest.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from kubernetes import client

from slinky.dev import stack
from tests.integration.cluster import Kube

GROUP, VERSION = "slinky.slurm.net", "v1beta1"
SLURMD_IMAGE = "ghcr.io/slinkyproject/slurmd:26.05-ubuntu26.04"
"""Upstream's slurmd image name: the real nodes pull the project's image under it from the stack's registry."""
REPO = Path(__file__).resolve().parents[2]


def objects(kube: Kube) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(kube.api)


def apply_nodeset(kube: Kube, ns: str, name: str, **spec: Any) -> dict[str, Any]:
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "NodeSet",
        "metadata": {"name": name},
        "spec": {
            "controllerRef": {"name": "slurm"},
            "slurmd": {"image": SLURMD_IMAGE},
            "extraConf": f"Features={stack.POD_FEATURE}",  # the stack's partition `nodesets`
            **spec,
        },
    }
    return dict(objects(kube).create_namespaced_custom_object(GROUP, VERSION, ns, "nodesets", body))


def nodeset(kube: Kube, ns: str, name: str) -> dict[str, Any]:
    return dict(objects(kube).get_namespaced_custom_object(GROUP, VERSION, ns, "nodesets", name))


def scale(kube: Kube, ns: str, name: str, replicas: int) -> None:
    objects(kube).patch_namespaced_custom_object(GROUP, VERSION, ns, "nodesets", name, {"spec": {"replicas": replicas}})


def patch_template(kube: Kube, ns: str, name: str, template: dict[str, Any]) -> None:
    """Change the NodeSet's pod template (a new revision: a rolling update, or OnDelete's next pods)."""
    body = {"spec": {"template": template}}
    objects(kube).patch_namespaced_custom_object(GROUP, VERSION, ns, "nodesets", name, body)


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


def start_operator(
    dev_env: dict[str, str], log: Path, *, fallback_seconds: float = 10, **settings: str
) -> subprocess.Popen[bytes]:
    """`python -m workers.operator` against the dev stack, its output appended to `log`; `settings` are more
    environment variables (`SLINKY_...`)."""
    fallback = {"SLINKY_OPERATOR__SCALE_IN_FALLBACK_SECONDS": str(fallback_seconds)}
    env = {**os.environ, **dev_env, "PATH": os.environ["PATH"], **fallback, **settings}
    with log.open("ab") as out:
        return subprocess.Popen([sys.executable, "-m", "workers.operator"], cwd=REPO, env=env, stdout=out, stderr=out)


def end_workflows_of(dev_env: dict[str, str], task_queue: str) -> None:
    """Terminate what an operator of the test's own task queue left running (it was stopped mid-flight): no
    worker will ever poll that queue again, and its workflows would stay Running in the shared Temporal."""
    subprocess.run(
        [
            "temporal", "workflow", "terminate", "--address", dev_env["TEMPORAL_ADDRESS"], "--yes",
            "--query", f"TaskQueue = '{task_queue}' AND ExecutionStatus = 'Running'", "--reason", "test ended",
        ],
        env={**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}, capture_output=True,
        timeout=60,
    )  # fmt: skip


def stop_operator(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


class Operator:
    """The operator as a process this test may kill -9 and start again."""

    def __init__(self, dev_env: dict[str, str], log: Path) -> None:
        self.dev_env, self.log = dev_env, log
        self.proc: subprocess.Popen[bytes] = start_operator(dev_env, log)

    def kill9(self) -> None:
        self.proc.kill()  # SIGKILL: no graceful shutdown, no worker drain
        self.proc.wait(10)

    def restart(self) -> None:
        self.proc = start_operator(self.dev_env, self.log)
