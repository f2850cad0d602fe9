"""Activities of a managed Controller's reconfigure (workflows/reconfigure.py): small idempotent verbs.

* ``check_slurm_config``: Slurm's own parser reads the candidate files (``scontrol`` with ``SLURM_CONF`` set
  to them, from the operator's Slurm tools: setting ``operator.slurm_tools_root``, a Slurm rootfs to chroot
  into, or the host's ``scontrol``); no tools: not checked, said so in the result;
* ``write_controller_config``: the ConfigMap ``<name>-config`` (files, hash, workflow, rejected hash) and, in
  restart mode, the StatefulSet's template hash; a slurmctld pod that is not ready on an older hash is deleted
  so that the StatefulSet makes it again (a StatefulSet never replaces a broken pod by itself); in place, every
  slurmctld pod is touched so that kubelet refreshes its files at once;
* ``controller_state``: the slurmctld pod (hash, ready, last exit and its message; with ``ha.enabled`` the
  primary and its backups as one: all on the new hash and ready, or the one that ended on it) and, through
  slurmrestd, whether slurmctld answers and when it last (re)read its config;
* ``reload_slurmctld``: ``scontrol reconfigure`` through slurmrestd;
* ``set_controller_condition``: the Controller's ``ConfigValid`` condition and an Event.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from temporalio import activity

from activities.nodeset import SlurmClients
from slinky.clients.errors import KubeNotFound
from slinky.clients.events import EventRecorder, object_event
from slinky.clients.kube import KubeClient, rfc3339
from slinky.operator import cluster_objects as objects
from slinky.operator import slurmconf
from slinky.operator.api.controller import Controller
from slinky.operator.conditions import set_condition
from slinky.operator.models import ControllerKey
from slinky.operator.reconfigure import (
    ANNOTATION_CONFIG_WRITTEN,
    ANNOTATION_RECONFIGURED_AT,
    ANNOTATION_REJECTED,
    ANNOTATION_VERIFIED,
    ANNOTATION_WORKFLOW,
    ConditionInput,
    ConfigCheck,
    ControllerRef,
    ControllerState,
    WriteConfigInput,
    config_error,
)

logger = logging.getLogger(__name__)
COMPONENT = "slurm-operator"
GROUP = "/apis/slinky.slurm.net/v1beta1"
CONDITION = "ConfigValid"


def _time(value: Any) -> float | None:
    try:
        return dt.datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp() if value else None
    except ValueError:
        return None


def run_parser(files: dict[str, str], tools_root: str) -> ConfigCheck:
    """Write the files to a scratch directory (inside the rootfs when given) and let ``scontrol`` parse them:
    it reads SLURM_CONF and every file it includes, and fails with Slurm's own message on a bad line."""
    root = Path(tools_root) if tools_root else None
    exe = "scontrol" if root is not None else shutil.which("scontrol")
    if exe is None:
        return ConfigCheck(ok=True, checked=False, error="no scontrol where the operator runs: not checked")
    base = (root / "tmp") if root else Path(tempfile.gettempdir())
    base.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="slinky-conf-check-", dir=base))
    try:
        for name, text in files.items():
            (scratch / name).write_text(text)
        inside = f"/tmp/{scratch.name}" if root else str(scratch)
        env = ["env", "-i", "PATH=/usr/bin:/bin:/usr/sbin:/sbin", f"SLURM_CONF={inside}/slurm.conf"]
        argv = [*(["chroot", str(root)] if root else []), *env, exe, "show", "hostnames", "localhost"]
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=20, check=False)
        except (OSError, subprocess.TimeoutExpired) as err:
            # The checker itself is broken (no chroot, a hung scontrol): say so, never refuse the config for it.
            return ConfigCheck(ok=True, checked=False, error=f"Slurm's parser could not run: {err}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if proc.returncode == 0:
        return ConfigCheck(ok=True)
    return ConfigCheck(ok=False, error=config_error(proc.stderr + proc.stdout))


class ClusterActivities:
    """The verbs, bound to the operator's clients."""

    def __init__(self, kube: KubeClient, slurm: SlurmClients, events: EventRecorder, *, tools_root: str = "") -> None:
        self.kube = kube
        self.slurm = slurm
        self.events = events
        self.tools_root = tools_root

    def all(self) -> list[Any]:
        return [
            self.check_slurm_config,
            self.write_controller_config,
            self.controller_state,
            self.reload_slurmctld,
            self.set_controller_condition,
        ]

    @activity.defn(name="check_slurm_config")
    async def check_slurm_config(self, files: dict[str, str]) -> ConfigCheck:
        return await asyncio.to_thread(run_parser, files, self.tools_root)

    async def _controller(self, namespace: str, name: str) -> Any:
        return await self.kube.get(f"{GROUP}/namespaces/{namespace}/controllers/{name}")

    @activity.defn(name="write_controller_config")
    async def write_controller_config(self, inp: WriteConfigInput) -> None:
        ns, name = inp.namespace, inp.name
        path = f"/api/v1/namespaces/{ns}/configmaps/{name}-config"
        try:
            live = await self.kube.get(path)
        except KubeNotFound:
            return  # the Controller is gone with its ConfigMap (a deleted namespace): nothing to write
        data: dict[str, str | None] = {k: None for k in live.get("data") or {} if k not in inp.files}
        data.update(inp.files)
        annotations = {
            objects.ANNOTATION_SLURM_CONFIG_HASH: inp.hash,
            ANNOTATION_WORKFLOW: inp.workflow_id,
            ANNOTATION_RECONFIGURED_AT: rfc3339(),
            ANNOTATION_REJECTED: inp.rejected_hash or None,
        }
        await self.kube.patch(path, {"metadata": {"annotations": annotations}, "data": data})
        pods = [p for p in await self._pods(ns, name) if p is not None]
        if not inp.roll_pod:
            touch = {"metadata": {"annotations": {ANNOTATION_CONFIG_WRITTEN: inp.hash}}}
            for pod in pods:  # kubelet refreshes a touched pod's projected files at once
                with contextlib.suppress(KubeNotFound):
                    await self.kube.patch(f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}", touch)
            return
        sts = f"/apis/apps/v1/namespaces/{ns}/statefulsets/{name}-controller"
        template = {"metadata": {"annotations": {objects.ANNOTATION_SLURM_CONFIG_HASH: inp.hash}}}
        try:
            await self.kube.patch(sts, {"spec": {"template": template}})
        except KubeNotFound:
            return
        for pod in pods:
            if _pod_hash(pod) != inp.hash and not _ready(pod):
                # A StatefulSet waits for a broken pod to become ready before it replaces it: it never would.
                with contextlib.suppress(KubeNotFound):
                    meta = pod["metadata"]
                    await self.kube.delete(f"/api/v1/namespaces/{ns}/pods/{meta['name']}", uid=meta["uid"])

    async def _pods(self, ns: str, name: str) -> list[Any]:
        """The Controller's slurmctld pods by ordinal (None where one is missing): one, or a primary and its
        backups with `ha.enabled`."""
        try:
            raw = await self._controller(ns, name)
            replicas = slurmconf.slurmctld_replicas(Controller.model_validate(raw))
        except (KubeNotFound, ValidationError):
            replicas = 1
        out: list[Any] = []
        for ordinal in range(replicas):
            try:
                out.append(await self.kube.get(f"/api/v1/namespaces/{ns}/pods/{name}-controller-{ordinal}"))
            except KubeNotFound:
                out.append(None)
        return out

    async def _written_hash(self, ns: str, name: str) -> str:
        try:
            cm = await self.kube.get(f"/api/v1/namespaces/{ns}/configmaps/{name}-config")
        except KubeNotFound:
            return ""
        return str((cm["metadata"].get("annotations") or {}).get(objects.ANNOTATION_SLURM_CONFIG_HASH) or "")

    @activity.defn(name="controller_state")
    async def controller_state(self, ref: ControllerRef) -> ControllerState:
        try:
            await self._controller(ref.namespace, ref.name)
        except KubeNotFound:
            return ControllerState(gone=True)
        pods = await self._pods(ref.namespace, ref.name)
        pod, pod_hash = pods[0], _pod_hash(pods[0]) if pods[0] is not None else ""
        if len(pods) > 1:
            pod, pod_hash = as_one_slurmctld(pods, await self._written_hash(ref.namespace, ref.name))
        responding: bool | None = None
        loaded: float | None = None
        try:
            client = await self.slurm.client(ControllerKey(namespace=ref.namespace, name=ref.name))
            pings = await client.ping()
            responding = any(p.responding for p in pings)
            if responding:
                loaded = (await client.diag()).req_time_start
        except Exception as err:  # no RestApi, or slurmrestd away: unknown, not an error of this verb
            activity.logger.debug("controller %s/%s: slurmrestd not asked: %s", ref.namespace, ref.name, err)
        if pod is None or None in pods:
            return ControllerState(responding=responding, loaded_since=float(loaded) if loaded else None)
        status = _slurmctld_status(pod)
        ended = _ended(status)
        return ControllerState(
            pod_exists=True,
            pod_uid=pod["metadata"]["uid"],
            pod_hash=pod_hash,
            ready=all(_ready(p) for p in pods),
            restarts=int(status.get("restartCount") or 0),
            last_exit_at=_time(ended.get("finishedAt")),
            last_error=str(ended.get("message") or ended.get("reason") or "")[:2000],
            last_exit_code=int(ended["exitCode"]) if ended.get("exitCode") is not None else None,
            responding=responding,
            loaded_since=float(loaded) if loaded else None,
        )

    @activity.defn(name="reload_slurmctld")
    async def reload_slurmctld(self, ref: ControllerRef) -> float:
        client = await self.slurm.client(ControllerKey(namespace=ref.namespace, name=ref.name))
        asked = time.time()
        await client.reconfigure()
        return asked

    @activity.defn(name="set_controller_condition")
    async def set_controller_condition(self, inp: ConditionInput) -> None:
        if inp.verified_hash:
            with contextlib.suppress(KubeNotFound):
                await self.kube.patch(
                    f"/api/v1/namespaces/{inp.namespace}/configmaps/{inp.name}-config",
                    {"metadata": {"annotations": {ANNOTATION_VERIFIED: inp.verified_hash}}},
                )
        try:
            raw = await self._controller(inp.namespace, inp.name)
        except KubeNotFound:
            return
        current = (raw.get("status") or {}).get("conditions") or []
        generation = int(raw["metadata"].get("generation") or 0)
        conditions = set_condition(current, CONDITION, inp.status, inp.reason, inp.message, generation)
        path = f"{GROUP}/namespaces/{inp.namespace}/controllers/{inp.name}/status"
        await self.kube.patch(path, {"status": {"conditions": conditions}}, decode=False)
        if inp.event:
            uid = str(raw["metadata"].get("uid", ""))
            self.events.record(
                object_event(
                    "slinky.slurm.net/v1beta1",
                    "Controller",
                    inp.namespace,
                    inp.name,
                    uid,
                    inp.reason,
                    inp.message,
                    inp.event,
                    COMPONENT,
                )
            )


def _slurmctld_status(pod: Any) -> dict[str, Any]:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return next((c for c in statuses if c.get("name") == "slurmctld"), {})


def _ended(status: dict[str, Any]) -> dict[str, Any]:
    """The slurmctld container's termination now, else its last one."""
    current = (status.get("state") or {}).get("terminated") or {}
    return current or (status.get("lastState") or {}).get("terminated") or {}


def as_one_slurmctld(pods: list[Any], written: str) -> tuple[Any, str]:
    """(the pod to report, the hash to report) for a primary and its backups, as one slurmctld for `judge`.

    A pod on the written hash whose slurmctld ended (the latest such end) is reported, with that hash: it may
    have refused the new config. Otherwise the primary, with the written hash once every pod runs it (and the
    first other hash before: the rolling update is not over)."""
    present = [p for p in pods if p is not None]
    ended = [p for p in present if _pod_hash(p) == written and _ended(_slurmctld_status(p))]
    if ended:
        latest = max(ended, key=lambda p: str(_ended(_slurmctld_status(p)).get("finishedAt") or ""))
        return latest, written
    others = [h for h in (_pod_hash(p) for p in present) if h != written]
    return pods[0], (others[0] if others else written)


def _pod_hash(pod: Any) -> str:
    return str(((pod.get("metadata") or {}).get("annotations") or {}).get(objects.ANNOTATION_SLURM_CONFIG_HASH) or "")


def _ready(pod: Any) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )
