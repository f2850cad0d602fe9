"""The Accounting reconciler: a managed slurmdbd (upstream's StatefulSet `<name>-accounting`) on a database.

Reconcile of a managed Accounting (an external one, ``external: true``, runs outside: only the Controllers'
slurm.conf names its ``externalConfig``):

1. Check what it names: the key Secrets, ``storageConfig`` (host, username, ``passwordKeyRef``: Secret and
   key), and everything ``slurmconf.validate_accounting`` checks. A problem is ``Ready=False`` with a reason
   and a message naming the field, plus a Warning Event; whatever runs keeps running.
2. Render slurmdbd.conf (the password read from its Secret) into the Secret ``<name>-accounting``; the
   StatefulSet's pod template carries its hash, so a change makes a new slurmdbd pod.
3. Status ``Ready``: the slurmdbd pod is ready; when its slurmdbd ends, the container's last words (a wrong
   password or an unreachable database: MariaDB's error as slurmdbd logs it) are the message.
4. While the pod is ready, every ``DATABASE_CHECK_SECONDS``: slurmdbd's own answer through a RestApi of a
   Controller that uses this Accounting (``accounting_health``). The database down while slurmdbd runs is
   ``Ready=False``, reason ``DatabaseUnreachable``, with slurmdbd's error and how many messages slurmctld
   holds for it; the pod is left alone (slurmdbd reconnects by itself and slurmctld sends what it held).
"""

from __future__ import annotations

import base64
import binascii
import logging
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from slinky.clients.errors import KubeNotFound, SlurmError
from slinky.operator import accounting_health, slurmconf
from slinky.operator import cluster_objects as objects
from slinky.operator.api.accounting import Accounting
from slinky.operator.models import ControllerKey
from workers.operator import cluster_pods
from workers.operator.apply import ensure
from workers.operator.controller import CONTROLLERS, GROUP, SECRETS, STATEFULSETS
from workers.operator.runtime import Runtime, Watch, set_condition
from workers.operator.slurm_clients import ControllerProblem, SlurmClients
from workers.operator.workqueue import Key

logger = logging.getLogger(__name__)
Obj = dict[str, Any]

ACCOUNTINGS = f"{GROUP}/accountings"
READY = "Ready"
DATABASE_CHECK_SECONDS = 10.0
"""How often a ready slurmdbd is asked whether its database answers (one GET per Accounting)."""


def accounting_path(namespace: str, name: str) -> str:
    return f"{GROUP}/namespaces/{namespace}/accountings/{name}"


class Problem(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class AccountingReconciler:
    kind = "Accounting"
    primary = ACCOUNTINGS

    def __init__(self, runtime: Runtime, slurm: SlurmClients) -> None:
        self.runtime = runtime
        self.slurm = slurm
        self.caches = runtime.caches
        self.watches: Sequence[Watch] = (
            Watch(SECRETS, self._by_secret),
            Watch(STATEFULSETS, self._by_owner),
            cluster_pods.pods_watch(objects.APP_SLURMDBD),
        )

    def _by_secret(self, obj: Obj) -> list[Key]:
        ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        out = []
        for acct in self.caches.in_namespace(ACCOUNTINGS, ns):
            spec = acct.get("spec") or {}
            refs = [spec.get(f) or {} for f in ("slurmKeyRef", "jwtKeyRef", "jwtHs256KeyRef")]
            refs.append((spec.get("storageConfig") or {}).get("passwordKeyRef") or {})
            if any(r.get("name") == name for r in refs):
                out.append((ns, acct["metadata"]["name"]))
        return out

    def _by_owner(self, obj: Obj) -> list[Key]:
        ns = obj["metadata"]["namespace"]
        refs = obj["metadata"].get("ownerReferences") or []
        return [(ns, str(r["name"])) for r in refs if r.get("kind") == "Accounting" and r.get("controller")]

    async def reconcile(self, key: Key) -> None:
        raw = self.caches.get(ACCOUNTINGS, *key)
        if raw is None or raw["metadata"].get("deletionTimestamp"):
            return
        try:
            accounting = Accounting.model_validate(raw)
        except ValidationError as err:
            await self._ready(raw, "False", "InvalidSpec", f"the Accounting does not parse: {err}")
            return
        if accounting.spec.external:
            return
        try:
            if problem := objects.image_problem(accounting):
                raise Problem("MissingImage", f"Accounting {key[0]}/{key[1]}: {problem}")
            conf = self._render(key, accounting)
        except Problem as problem:
            self.runtime.warn_once(raw, problem.reason, str(problem))
            await self._ready(raw, "False", problem.reason, str(problem))
            return
        conf_hash = slurmconf.config_hash({slurmconf.SLURMDBD_CONF: conf})
        await ensure(self.runtime.kube, objects.accounting_secret(accounting, conf))
        await ensure(self.runtime.kube, objects.accounting_service(accounting))
        sts, how = await ensure(self.runtime.kube, objects.accounting_statefulset(accounting, config_hash=conf_hash))
        if how != "unchanged":
            logger.info(
                "Accounting %s/%s: StatefulSet %s %s (slurmdbd.conf %s)", *key, sts["metadata"]["name"], how, conf_hash
            )
        await self._status_from_pod(raw, accounting)

    def _render(self, key: Key, accounting: Accounting) -> str:
        ns, name = key
        spec = accounting.spec
        for field, ref in (
            ("spec.slurmKeyRef", spec.slurm_key_ref),
            ("spec.jwtKeyRef", spec.jwt_key_ref or spec.jwt_hs256_key_ref),
        ):
            if ref is None or not ref.name or not ref.key:
                raise Problem("KeyMissing", f"Accounting {ns}/{name}: {field} (name and key) is required")
            self._secret_value(ns, name, field, ref.name, ref.key)
        storage = spec.storage_config
        ref = storage.password_key_ref
        password = ""
        if ref is not None and ref.name:
            password = self._secret_value(ns, name, "spec.storageConfig.passwordKeyRef", ref.name, ref.key)
        problems = slurmconf.validate_accounting(accounting, password)
        if problems:
            p = problems[0]
            raise Problem("InvalidConfig", f"Accounting {ns}/{name}: {p.field}: {p.message}")
        return slurmconf.slurmdbd_conf(accounting, password)

    def _secret_value(self, ns: str, name: str, field: str, secret: str, key: str) -> str:
        obj = self.caches.get(SECRETS, ns, secret)
        data = (obj or {}).get("data") or {}
        if obj is None or key not in data:
            what = "does not exist" if obj is None else f"has no key {key}"
            raise Problem("SecretNotFound", f"Accounting {ns}/{name}: {field}: Secret {ns}/{secret} {what}")
        try:
            return base64.b64decode(data[key]).decode().rstrip("\n")
        except (binascii.Error, UnicodeDecodeError) as err:
            raise Problem(
                "SecretNotFound", f"Accounting {ns}/{name}: {field}: Secret {ns}/{secret} key {key}: {err}"
            ) from err

    async def _status_from_pod(self, raw: Obj, accounting: Accounting) -> None:
        ns = raw["metadata"]["namespace"]
        pod_name = objects.accounting_pod_name(accounting)
        try:
            pod = await self.runtime.kube.get(f"/api/v1/namespaces/{ns}/pods/{pod_name}")
        except KubeNotFound:  # not made yet: not ready
            pod = {}
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in (pod.get("status") or {}).get("conditions") or []
        )
        storage = accounting.spec.storage_config
        where = f"{storage.username}@{storage.host}:{storage.port}/{storage.database}"
        if ready:
            key = (ns, raw["metadata"]["name"])
            verdict = await self._database(key, pod_name, where)
            if verdict is None:
                await self._ready(raw, "True", "SlurmdbdReady", f"slurmdbd pod {pod_name} is ready (database {where})")
            else:
                if verdict.status == "False":
                    self.runtime.warn_once(raw, verdict.reason, verdict.event or verdict.message)
                await self._ready(raw, verdict.status, verdict.reason, verdict.message)
            self.runtime.requeue_later(self.kind, key, DATABASE_CHECK_SECONDS)
            return
        status: Obj = next(
            (c for c in (pod.get("status") or {}).get("containerStatuses") or [] if c.get("name") == "slurmdbd"), {}
        )
        ended = (
            ((status.get("state") or {}).get("terminated")) or ((status.get("lastState") or {}).get("terminated")) or {}
        )
        said = str(ended.get("message") or "").strip()
        if said:
            message = f"slurmdbd pod {pod_name} ends (database {where}): {said}"
            self.runtime.warn_once(raw, "SlurmdbdFailing", message)
            await self._ready(raw, "False", "SlurmdbdFailing", message)
            self.runtime.requeue_later(self.kind, (ns, raw["metadata"]["name"]), 5.0)
            return
        await self._ready(
            raw, "False", "SlurmdbdNotReady", f"slurmdbd pod {pod_name} is not ready yet (database {where})"
        )
        self.runtime.requeue_later(self.kind, (ns, raw["metadata"]["name"]), 2.0)

    async def _database(self, key: Key, pod: str, where: str) -> accounting_health.DatabaseVerdict | None:
        """slurmdbd's own answer, through the slurmrestd of the first Controller (by name) that uses this
        Accounting; None when no such Controller has a slurmrestd that answers (nothing known)."""
        ns, name = key
        users = [
            c["metadata"]["name"]
            for c in self.caches.in_namespace(CONTROLLERS, ns)
            if ((c.get("spec") or {}).get("accountingRef") or {}).get("name") == name
        ]
        for controller in users:
            try:
                slurm = await self.slurm.client(ControllerKey(namespace=ns, name=controller))
            except (ControllerProblem, KubeNotFound):
                continue
            via = f"Controller {ns}/{controller}'s slurmrestd"
            try:
                await slurm.slurmdbd_diag()
                return accounting_health.database_verdict(pod=pod, database=where, via=via, error=None)
            except SlurmError as err:
                queued = None
                try:
                    queued = (await slurm.diag()).dbd_agent_queue_size
                except SlurmError:
                    pass
                verdict = accounting_health.database_verdict(pod=pod, database=where, via=via, error=err, queued=queued)
                if verdict is not None:
                    return verdict
        return None

    async def _ready(self, raw: Obj, status: str, reason: str, message: str) -> None:
        if status == "True":  # a problem that comes back is told again
            self.runtime.clear_warnings(raw)
        generation = int(raw["metadata"].get("generation") or 0)
        conditions = set_condition(
            (raw.get("status") or {}).get("conditions") or [], READY, status, reason, message, generation
        )
        conditions = cluster_pods.with_pods_healthy(self.runtime, raw, objects.APP_SLURMDBD, conditions)
        meta = raw["metadata"]
        await self.runtime.write_status(
            accounting_path(meta["namespace"], meta["name"]), raw, {"conditions": conditions}
        )
