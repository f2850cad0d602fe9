"""The real stack as integration tests see it: raw slurmrestd, the Temporal client and the Kubernetes API, each
answering with plain dicts, plus small readers of what they answer (job state, pod phase, node, labels)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any

import httpx
from kubernetes import client, config
from kubernetes.client.rest import ApiException
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.common import SearchAttributeKey
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError, RPCStatusCode

from slinky import wellknown
from slinky.bridge.models.workload import WhyPending, workload_workflow_id
from tests.builders import make_pod

REST = "/slurm/v0.0.44"
LIVE_STATES = frozenset({"PENDING", "RUNNING", "CONFIGURING", "SUSPENDED", "REQUEUED", "RESIZING"})


# ------------------------------------------------------------------------------------------------ Slurm
class Slurm:
    """Raw slurmrestd v0.0.44 with the stack's JWT (re-read per call: the file may rotate)."""

    def __init__(self, env: dict[str, str]) -> None:
        self.jwt_file = Path(env["SLURM_JWT_FILE"])
        self.http = httpx.Client(base_url=env["SLURM_REST_URL"], timeout=30)

    def _headers(self) -> dict[str, str]:
        return {"X-SLURM-USER-NAME": "slurm", "X-SLURM-USER-TOKEN": self.jwt_file.read_text().strip()}

    def jobs(self) -> list[dict[str, Any]]:
        answer = self.http.get(f"{REST}/jobs", headers=self._headers()).raise_for_status().json()
        return list(answer["jobs"])

    def job(self, job_id: int | str) -> dict[str, Any] | None:
        resp = self.http.get(f"{REST}/job/{job_id}", headers=self._headers())
        if resp.status_code == 404:
            return None
        jobs = resp.raise_for_status().json().get("jobs") or []
        return jobs[0] if jobs else None

    def cancel(self, job_id: int | str) -> None:
        self.http.delete(f"{REST}/job/{job_id}", headers=self._headers()).raise_for_status()

    def jobs_of(self, namespace: str) -> list[dict[str, Any]]:
        """Every job (live or recently ended) whose admin_comment names a pod of ``namespace``."""
        return [j for j in self.jobs() if any(p.startswith(f"{namespace}/") for p in pods_of(j))]

    def jobs_of_pod(self, namespace: str, name: str) -> list[dict[str, Any]]:
        return [j for j in self.jobs() if f"{namespace}/{name}" in pods_of(j)]


def pods_of(job: dict[str, Any]) -> list[str]:
    try:
        data = json.loads(job.get("admin_comment") or "")
    except ValueError:
        return []
    pods = data.get("pods") if isinstance(data, dict) else None
    return [p for p in pods if isinstance(p, str)] if isinstance(pods, list) else []


def state(job: dict[str, Any] | None) -> str:
    return str(job["job_state"][0]) if job and job.get("job_state") else ""


def number(value: Any) -> Any:
    """A v0.0.44 ``{set, infinite, number}`` field's number (plain values pass through)."""
    return value.get("number") if isinstance(value, dict) else value


def is_live(job: dict[str, Any]) -> bool:
    return state(job) in LIVE_STATES


# ------------------------------------------------------------------------------------------------ Temporal
class Temporal:
    """A synchronous face on the Temporal client (its own event loop), for sync tests."""

    def __init__(self, env: dict[str, str]) -> None:
        self.loop = asyncio.new_event_loop()
        self.client = self.loop.run_until_complete(
            Client.connect(
                env["TEMPORAL_ADDRESS"],
                namespace=env["TEMPORAL_NAMESPACE"],
                data_converter=pydantic_data_converter,
            )
        )

    def status(self, workflow_id: str) -> WorkflowExecutionStatus | None:
        async def describe() -> WorkflowExecutionStatus | None:
            try:
                desc = await self.client.get_workflow_handle(workflow_id).describe()
            except RPCError as err:
                if err.status == RPCStatusCode.NOT_FOUND:
                    return None
                raise
            return desc.status

        return self.loop.run_until_complete(describe())

    def why_pending(self, workflow_id: str) -> WhyPending:
        handle = self.client.get_workflow_handle(workflow_id)
        why: WhyPending = self.loop.run_until_complete(handle.query("why_pending", result_type=WhyPending))
        return why

    def search_attribute(self, workflow_id: str, key: SearchAttributeKey[Any]) -> Any:
        handle = self.client.get_workflow_handle(workflow_id)
        desc = self.loop.run_until_complete(handle.describe())
        return desc.typed_search_attributes.get(key)

    def completed(self, workflow_id: str) -> bool:
        return self.status(workflow_id) == WorkflowExecutionStatus.COMPLETED

    def close(self) -> None:
        self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        self.loop.close()


# ------------------------------------------------------------------------------------------------ Kubernetes
class Kube:
    """The kubernetes client, answering with plain camelCase dicts like the API server's JSON."""

    def __init__(self, env: dict[str, str]) -> None:
        self.api = config.new_client_from_config(config_file=env["KUBECONFIG"])
        self.core = client.CoreV1Api(self.api)
        self.batch = client.BatchV1Api(self.api)

    @staticmethod
    def _json(resp: Any) -> Any:
        data = json.loads(resp.data)
        resp.release_conn()
        return data

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return dict(self._json(self.core.read_namespaced_pod(name, namespace, _preload_content=False)))
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    def pods(self, namespace: str) -> list[dict[str, Any]]:
        return list(self._json(self.core.list_namespaced_pod(namespace, _preload_content=False))["items"])

    def create_pod(self, namespace: str, name: str, **kwargs: Any) -> dict[str, Any]:
        body = make_pod(name, namespace, **kwargs)
        body["metadata"].pop("uid")
        body.pop("status")
        return dict(self._json(self.core.create_namespaced_pod(namespace, body, _preload_content=False)))

    def delete_pod(self, namespace: str, name: str) -> None:
        with contextlib.suppress(ApiException):
            self.core.delete_namespaced_pod(name, namespace, _preload_content=False).release_conn()

    def patch(self, namespace: str, name: str, body: dict[str, Any]) -> None:
        self.core.patch_namespaced_pod(name, namespace, body, _preload_content=False).release_conn()

    def annotate(self, namespace: str, name: str, annotations: dict[str, str | None]) -> None:
        self.patch(namespace, name, {"metadata": {"annotations": annotations}})

    def namespace_gone_or_going(self, name: str) -> bool:
        """The namespace is deleted or being deleted (a run's cleanup)."""
        try:
            status = self.core.read_namespace(name).status
        except ApiException as err:
            return bool(err.status == 404)
        return bool(status and status.phase == "Terminating")

    def events(self, namespace: str, name: str) -> list[dict[str, Any]]:
        resp = self.core.list_namespaced_event(
            namespace, field_selector=f"involvedObject.name={name}", _preload_content=False
        )
        return list(self._json(resp)["items"])

    def strip_finalizers(self, namespace: str) -> None:
        for pod in self.pods(namespace):
            if pod["metadata"].get("finalizers"):
                with contextlib.suppress(ApiException):
                    self.core.patch_namespaced_pod(
                        pod["metadata"]["name"],
                        namespace,
                        {"metadata": {"finalizers": None}},
                        _preload_content=False,
                    ).release_conn()


def condition(pod: dict[str, Any] | None, type_: str = "PodScheduled") -> dict[str, Any]:
    for cond in (pod or {}).get("status", {}).get("conditions") or []:
        if cond.get("type") == type_:
            return dict(cond)
    return {}


def phase(pod: dict[str, Any] | None) -> str:
    return str((pod or {}).get("status", {}).get("phase", ""))


def node_of(pod: dict[str, Any] | None) -> str:
    return str((pod or {}).get("spec", {}).get("nodeName") or "")


def wid(pod: dict[str, Any]) -> str:
    return workload_workflow_id(pod["metadata"]["namespace"], pod["metadata"]["uid"])


def job_label(pod: dict[str, Any] | None) -> str:
    return str(((pod or {}).get("metadata", {}).get("labels") or {}).get(wellknown.LABEL_SLURM_JOB_ID, ""))
