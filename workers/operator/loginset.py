"""The LoginSet reconciler: login pods (sackd, configless) for a Controller (upstream's Deployment `<name>`).

Reconcile: the Controller it names must exist and the ``sssdConfRef`` Secret key must be there (else
``Ready=False`` with the reason and a Warning Event; pods that run keep running); then the Deployment (its
``replicas`` is the LoginSet's, zero included: the scale subresource and ``kubectl scale lss/<name>`` work)
and the Service; sshd's ConfigMap ``<name>-ssh-config`` (sshd_config, root's authorized_keys) and, once, the
host keys Secret ``<name>-ssh-host-keys``; status ``replicas`` (ready login pods), ``selector`` (for the scale
subresource) and ``Ready``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from slinky.operator import cluster_objects as objects
from slinky.operator import ssh
from slinky.operator.api.controller import Controller
from slinky.operator.api.loginset import LoginSet
from workers.operator import cluster_pods
from workers.operator.apply import ensure
from workers.operator.controller import CONTROLLERS, GROUP, SECRETS
from workers.operator.restapi import DEPLOYMENTS
from workers.operator.runtime import Runtime, Watch, set_condition
from workers.operator.workqueue import Key

logger = logging.getLogger(__name__)
Obj = dict[str, Any]

LOGINSETS = f"{GROUP}/loginsets"
READY = "Ready"
FIELDS_SUPPORTED = "FieldsSupported"


def loginset_path(namespace: str, name: str) -> str:
    return f"{GROUP}/namespaces/{namespace}/loginsets/{name}"


class LoginSetReconciler:
    kind = "LoginSet"
    primary = LOGINSETS

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.caches = runtime.caches
        self.watches: Sequence[Watch] = (
            Watch(CONTROLLERS, self._by_controller),
            Watch(SECRETS, self._by_secret),
            Watch(DEPLOYMENTS, self._by_owner),
            cluster_pods.pods_watch(objects.APP_LOGIN),
        )

    def _mine(self, ns: str) -> list[Obj]:
        return self.caches.in_namespace(LOGINSETS, ns)

    def _by_controller(self, obj: Obj) -> list[Key]:
        ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        return [
            (ns, ls["metadata"]["name"])
            for ls in self._mine(ns)
            if ((ls.get("spec") or {}).get("controllerRef") or {}).get("name") == name
        ]

    def _by_secret(self, obj: Obj) -> list[Key]:
        ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        return [
            (ns, ls["metadata"]["name"])
            for ls in self._mine(ns)
            if ((ls.get("spec") or {}).get("sssdConfRef") or {}).get("name") == name
        ]

    def _by_owner(self, obj: Obj) -> list[Key]:
        ns = obj["metadata"]["namespace"]
        refs = obj["metadata"].get("ownerReferences") or []
        return [(ns, str(r["name"])) for r in refs if r.get("kind") == "LoginSet" and r.get("controller")]

    async def reconcile(self, key: Key) -> None:
        raw = self.caches.get(LOGINSETS, *key)
        if raw is None or raw["metadata"].get("deletionTimestamp"):
            return
        ns, name = key
        try:
            loginset = LoginSet.model_validate(raw)
        except ValidationError as err:
            await self._status(raw, 0, "False", "InvalidSpec", f"the LoginSet does not parse: {err}")
            return
        ref = loginset.spec.controller_ref.name
        craw = self.caches.get(CONTROLLERS, ns, ref) if ref else None
        problem: tuple[str, str] | None = None
        if craw is None:
            problem = (
                "ControllerNotFound",
                f"LoginSet {ns}/{name}: spec.controllerRef: Controller {ns}/{ref} does not exist",
            )
        else:
            sssd = loginset.spec.sssd_conf_ref
            secret = self.caches.get(SECRETS, ns, sssd.name) if sssd.name else None
            if secret is None or sssd.key not in (secret.get("data") or {}):
                what = "does not exist" if secret is None else f"has no key {sssd.key}"
                problem = (
                    "SssdConfNotFound",
                    f"LoginSet {ns}/{name}: spec.sssdConfRef: Secret {ns}/{sssd.name} {what}",
                )
        deployment: Obj | None = None
        if problem is None and craw is not None:
            try:
                deployment = objects.loginset_deployment(loginset, Controller.model_validate(craw))
            except ValueError as err:
                reason = "MissingImage" if isinstance(err, objects.MissingImage) else "InvalidSpec"
                problem = (reason, f"LoginSet {ns}/{name}: {err}")
        if problem is not None or deployment is None:
            reason, message = problem or ("InvalidSpec", "no Deployment")
            self.runtime.warn_once(raw, reason, message)
            await self._status(raw, None, "False", reason, message)
            return
        await ensure(self.runtime.kube, objects.loginset_ssh_config(loginset))
        if self.caches.get(SECRETS, ns, ssh.host_keys_name(name)) is None:  # made once, then kept
            await ensure(self.runtime.kube, objects.loginset_host_keys(loginset, ssh.host_keys(f"{ns}/{name}")))
        live, how = await ensure(self.runtime.kube, deployment)
        if how != "unchanged":
            logger.info("LoginSet %s/%s: Deployment %s %s", ns, name, live["metadata"]["name"], how)
        await ensure(self.runtime.kube, objects.loginset_service(loginset))
        self.runtime.clear_warnings(raw)
        want = int(deployment["spec"].get("replicas") or 0)
        ready = int((live.get("status") or {}).get("readyReplicas") or 0)
        ok = ready >= want
        message = f"{ready} of {want} login pods ready (sackd configless from Controller {ref})"
        await self._status(raw, ready, "True" if ok else "False", "LoginReady" if ok else "LoginNotReady", message)
        if not ok:
            self.runtime.requeue_later(self.kind, key, 2.0)

    async def _status(self, raw: Obj, replicas: int | None, status: str, reason: str, message: str) -> None:
        generation = int(raw["metadata"].get("generation") or 0)
        conditions = set_condition(
            (raw.get("status") or {}).get("conditions") or [], READY, status, reason, message, generation
        )
        every = "every field set is reconciled"
        conditions = set_condition(conditions, FIELDS_SUPPORTED, "True", "AllSupported", every, generation)
        conditions = cluster_pods.with_pods_healthy(self.runtime, raw, objects.APP_LOGIN, conditions)
        body: Obj = {"conditions": conditions}
        try:
            body["selector"] = ",".join(
                f"{k}={v}" for k, v in sorted(objects.selector_labels("login", LoginSet.model_validate(raw)).items())
            )
        except (ValidationError, TypeError):
            pass
        if replicas is not None:
            body["replicas"] = replicas
        meta = raw["metadata"]
        await self.runtime.write_status(loginset_path(meta["namespace"], meta["name"]), raw, body)
