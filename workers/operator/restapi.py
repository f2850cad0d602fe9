"""The RestApi reconciler: slurmrestd pods for a managed Controller (upstream's Deployment `<name>-restapi`).

Reconcile: the Controller it names must exist and be managed (an external one has its own slurmrestd:
``ControllerNotFound`` / ``ExternalController`` on the ``Ready`` condition, with a Warning Event); then the
Deployment ``<name>-restapi`` (container ``slurmrestd`` on port 6820, with the ``openapi/slurmdbd`` plugin
when the Controller has an Accounting) and its Service; status ``Ready`` from the Deployment's ready replicas.
The operator's own Slurm client for that Controller talks to the oldest RestApi (workers/operator/slurm_clients.py).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from slinky.operator import cluster_objects as objects
from slinky.operator.api.controller import Controller
from slinky.operator.api.restapi import RestApi
from workers.operator import cluster_pods
from workers.operator.apply import ensure
from workers.operator.controller import CONTROLLERS, GROUP
from workers.operator.runtime import Runtime, Watch, set_condition
from workers.operator.workqueue import Key

logger = logging.getLogger(__name__)
Obj = dict[str, Any]

RESTAPIS = f"{GROUP}/restapis"
DEPLOYMENTS = "/apis/apps/v1/deployments"
READY = "Ready"


def restapi_path(namespace: str, name: str) -> str:
    return f"{GROUP}/namespaces/{namespace}/restapis/{name}"


class RestApiReconciler:
    kind = "RestApi"
    primary = RESTAPIS

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.caches = runtime.caches
        self.watches: Sequence[Watch] = (
            Watch(CONTROLLERS, self._by_controller),
            Watch(DEPLOYMENTS, self._by_owner),
            cluster_pods.pods_watch(objects.APP_SLURMRESTD),
        )

    def _by_controller(self, obj: Obj) -> list[Key]:
        ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        return [
            (ns, r["metadata"]["name"])
            for r in self.caches.in_namespace(RESTAPIS, ns)
            if ((r.get("spec") or {}).get("controllerRef") or {}).get("name") == name
        ]

    def _by_owner(self, obj: Obj) -> list[Key]:
        ns = obj["metadata"]["namespace"]
        refs = obj["metadata"].get("ownerReferences") or []
        return [(ns, str(r["name"])) for r in refs if r.get("kind") == "RestApi" and r.get("controller")]

    async def reconcile(self, key: Key) -> None:
        raw = self.caches.get(RESTAPIS, *key)
        if raw is None or raw["metadata"].get("deletionTimestamp"):
            return
        try:
            restapi = RestApi.model_validate(raw)
        except ValidationError as err:
            await self._ready(raw, "False", "InvalidSpec", f"the RestApi does not parse: {err}")
            return
        ns, name = key
        ref = restapi.spec.controller_ref.name
        craw = self.caches.get(CONTROLLERS, ns, ref) if ref else None
        if craw is None:
            message = f"RestApi {ns}/{name}: spec.controllerRef: Controller {ns}/{ref} does not exist"
            self.runtime.warn_once(raw, "ControllerNotFound", message)
            await self._ready(raw, "False", "ControllerNotFound", message)
            return
        controller = Controller.model_validate(craw)
        if controller.spec.external:
            message = f"RestApi {ns}/{name}: Controller {ns}/{ref} is external; its slurmrestd runs outside"
            self.runtime.warn_once(raw, "ExternalController", message)
            await self._ready(raw, "False", "ExternalController", message)
            return
        has_accounting = bool(controller.spec.accounting_ref and controller.spec.accounting_ref.name)
        try:
            deployment = objects.restapi_deployment(restapi, controller, has_accounting)
        except ValueError as err:
            reason = "MissingImage" if isinstance(err, objects.MissingImage) else "InvalidSpec"
            message = f"RestApi {ns}/{name}: {err}"
            self.runtime.warn_once(raw, reason, message)
            await self._ready(raw, "False", reason, message)
            return
        live, how = await ensure(self.runtime.kube, deployment)
        if how != "unchanged":
            logger.info("RestApi %s/%s: Deployment %s %s", ns, name, live["metadata"]["name"], how)
        await ensure(self.runtime.kube, objects.restapi_service(restapi))
        self.runtime.clear_warnings(raw)
        want = int(deployment["spec"].get("replicas") or 0)
        ready = int((live.get("status") or {}).get("readyReplicas") or 0)
        ok = ready >= want
        await self._ready(
            raw,
            "True" if ok else "False",
            "SlurmrestdReady" if ok else "SlurmrestdNotReady",
            f"{ready} of {want} slurmrestd pods ready (Service {objects.restapi_service_name(restapi)}, port 6820)",
        )

    async def _ready(self, raw: Obj, status: str, reason: str, message: str) -> None:
        generation = int(raw["metadata"].get("generation") or 0)
        conditions = set_condition(
            (raw.get("status") or {}).get("conditions") or [], READY, status, reason, message, generation
        )
        conditions = cluster_pods.with_pods_healthy(self.runtime, raw, objects.APP_SLURMRESTD, conditions)
        meta = raw["metadata"]
        await self.runtime.write_status(restapi_path(meta["namespace"], meta["name"]), raw, {"conditions": conditions})
