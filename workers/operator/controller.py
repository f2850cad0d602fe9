"""The Controller reconciler: a managed Controller (``spec.external: false``) becomes a running slurmctld.

Reconcile of one Controller (an external one is part 1's: only NodeSets talk to it):

1. Check what it names: the key Secrets (``slurmKeyRef``, ``jwtKeyRef``), the Accounting, the ConfigMaps of
   ``configFileRefs`` and the script refs, a ClusterName no other Controller has, and everything
   ``slurmconf.validate`` checks (extraConf lines, partition configs, NodeSet names). A problem is the
   ``ConfigValid`` condition (reason and message naming the object and the field) plus a Warning Event, and
   the reconcile stops there: whatever runs keeps running with its last good config.
2. Render slurm.conf (and cgroup.conf unless a config ConfigMap has one) from the Controller, its NodeSets
   and its Accounting; hash it.
3. Apply: the ConfigMap ``<name>-config``, the Services ``<name>-controller`` and ``<name>-controller-internal``,
   the NodeSets' headless ``<name>-workers``, and the StatefulSet ``<name>-controller`` (slurmctld pods
   ``<name>-controller-<i>``: one, or with ``ha.enabled`` a primary and ``ha.backups`` backups on one
   ReadWriteMany claim; the StatefulSet controller makes a deleted one again).
4. The active slurmctld: upstream's label ``controller.slinky.slurm.net/active`` on the pod in control and on
   no other. With HA the Controller Service selects by it, so slurmd, sackd and slurmrestd (SlurmctldAddr)
   follow a takeover. Which one is in control: slurmctld's ``/readyz`` answers 2xx only there, asked of every
   pod at once every ``ACTIVE_SYNC_SECONDS``. (Upstream asks slurmrestd's ping, which asks each slurmctld in
   turn: a hung primary costs Slurm's MessageTimeout per ping, and the label moved a minute after a
   takeover when tried here.)
5. Status: ``ConfigValid``, ``Ready`` (the slurmctld in control is ready) and ``FieldsSupported``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable, Sequence
from typing import Any

import httpx
from pydantic import ValidationError
from temporalio.client import Client
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError

from slinky import wellknown
from slinky.clients.errors import KubeNotFound
from slinky.config import OperatorSettings
from slinky.operator import cluster_objects as objects
from slinky.operator import slurmconf
from slinky.operator.api.accounting import Accounting
from slinky.operator.api.controller import Controller
from slinky.operator.api.nodeset import NodeSet
from slinky.operator.pods import SLURMCTLD_PORT
from slinky.operator.reconfigure import ANNOTATION_REJECTED, ANNOTATION_VERIFIED, ANNOTATION_WORKFLOW, ReconfigureInput
from slinky.operator.reconfigure import workflow_id as reconfigure_workflow_id
from slinky.operator.updates import is_ready
from slinky.operator.validation import controller_problems
from workers.operator import cluster_pods
from workers.operator.apply import ensure, path_of
from workers.operator.runtime import Runtime, Watch, set_condition
from workers.operator.workqueue import Key

logger = logging.getLogger(__name__)
Obj = dict[str, Any]

GROUP = "/apis/slinky.slurm.net/v1beta1"
CONTROLLERS = f"{GROUP}/controllers"
NODESETS = f"{GROUP}/nodesets"
ACCOUNTINGS = f"{GROUP}/accountings"
CONFIGMAPS = "/api/v1/configmaps"
SECRETS = "/api/v1/secrets"
STATEFULSETS = "/apis/apps/v1/statefulsets"
CLAIMS = "/api/v1/persistentvolumeclaims"

CONFIG_VALID = "ConfigValid"
READY = "Ready"
FIELDS_SUPPORTED = "FieldsSupported"
SERVICE_MONITOR_RETRY_SECONDS = 20.0
"""How often a Controller asking for a ServiceMonitor looks again for the monitoring.coreos.com API."""
ACTIVE_SYNC_SECONDS = 5.0
"""How often an HA Controller's slurmctld pods are asked which one is in control (the Service follows)."""
READYZ_TIMEOUT_SECONDS = 2.0
"""A slurmctld that does not answer /readyz in this time is not in control (a hung one)."""


def controller_path(namespace: str, name: str) -> str:
    return f"{GROUP}/namespaces/{namespace}/controllers/{name}"


def _refs(spec: Obj) -> dict[str, list[str]]:
    """The ConfigMaps a Controller's five file refs name, by field."""
    fields = (
        "configFileRefs",
        "prologScriptRefs",
        "epilogScriptRefs",
        "prologSlurmctldScriptRefs",
        "epilogSlurmctldScriptRefs",
    )
    return {f: [str(r.get("name")) for r in spec.get(f) or [] if r.get("name")] for f in fields}


def _secret_names(spec: Obj) -> set[str]:
    return {
        str(spec[f]["name"]) for f in ("slurmKeyRef", "jwtKeyRef", "jwtHs256KeyRef") if (spec.get(f) or {}).get("name")
    }


class Problem(Exception):
    """Why a Controller cannot be rendered: the field, a condition reason, and a message naming both."""

    def __init__(self, field: str, reason: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.reason = reason


class ControllerReconciler:
    kind = "Controller"
    primary = CONTROLLERS

    def __init__(self, runtime: Runtime, settings: OperatorSettings, temporal: Client | None = None) -> None:
        self.runtime = runtime
        self.settings = settings
        self.temporal = temporal
        self._probe = httpx.AsyncClient(timeout=READYZ_TIMEOUT_SECONDS)
        self.caches = runtime.caches
        self._monitored: dict[str, bool] = {}
        """Per Controller uid: whether its ServiceMonitor may exist (a delete is tried once after a start)."""
        self.watches: Sequence[Watch] = (
            Watch(NODESETS, self._by_controller_ref),
            cluster_pods.pods_watch(objects.APP_SLURMCTLD),
            Watch(ACCOUNTINGS, self._by_accounting),
            Watch(CONFIGMAPS, self._by_configmap),
            Watch(SECRETS, self._by_secret),
            Watch(STATEFULSETS, self._by_owner),
            Watch(CLAIMS, self._by_claim),
        )
        self.reconciles = 0

    # ------------------------------------------------------------------------------------ event -> keys
    def _controllers(self, namespace: str) -> Iterable[Obj]:
        return self.caches.in_namespace(CONTROLLERS, namespace)

    def _by_controller_ref(self, obj: Obj) -> list[Key]:
        ref = ((obj.get("spec") or {}).get("controllerRef") or {}).get("name")
        return [(obj["metadata"]["namespace"], str(ref))] if ref else []

    def _naming(self, obj: Obj, field: str, key: str) -> list[Key]:
        """The Controllers of `obj`'s namespace whose `spec.<field>.<key>` names `obj`."""
        ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        return [
            (ns, c["metadata"]["name"])
            for c in self._controllers(ns)
            if ((c.get("spec") or {}).get(field) or {}).get(key) == name
        ]

    def _by_accounting(self, obj: Obj) -> list[Key]:
        return self._naming(obj, "accountingRef", "name")

    def _by_configmap(self, obj: Obj) -> list[Key]:
        ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        return [
            (ns, c["metadata"]["name"])
            for c in self._controllers(ns)
            if any(name in names for names in _refs(c.get("spec") or {}).values())
        ]

    def _by_secret(self, obj: Obj) -> list[Key]:
        ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        return [
            (ns, c["metadata"]["name"]) for c in self._controllers(ns) if name in _secret_names(c.get("spec") or {})
        ]

    def _by_claim(self, obj: Obj) -> list[Key]:
        """An HA Controller's `persistence.existingClaim` appearing or changing."""
        return self._naming(obj, "persistence", "existingClaim")

    def _by_owner(self, obj: Obj) -> list[Key]:
        ns = obj["metadata"]["namespace"]
        return [
            (ns, str(ref["name"]))
            for ref in obj["metadata"].get("ownerReferences") or []
            if ref.get("kind") == "Controller" and ref.get("controller")
        ]

    # ------------------------------------------------------------------------------------ reconcile
    async def reconcile(self, key: Key) -> None:
        self.reconciles += 1
        raw = self.caches.get(CONTROLLERS, *key)
        if raw is None or raw["metadata"].get("deletionTimestamp"):
            return
        try:
            controller = Controller.model_validate(raw)
        except ValidationError as err:
            await self._status(raw, [(CONFIG_VALID, "False", "InvalidSpec", f"the Controller does not parse: {err}")])
            return
        if controller.spec.external:
            return
        if not self.runtime.all_synced():
            # A first config rendered before the NodeSets were listed would roll slurmctld once they are.
            self.runtime.requeue_later(self.kind, key, 0.2)
            return
        problem, files = self._render(raw, controller)
        if problem is None and (missing := objects.image_problem(controller)):
            problem = ("spec.slurmctld.image", "MissingImage", f"Controller {key[0]}/{key[1]}: {missing}")
        if problem is None:
            problem = await self._ha_problem(raw, controller)
        if problem is not None:
            _, reason, message = problem
            self.runtime.warn_once(raw, reason, message)
            await self._status(raw, [(CONFIG_VALID, "False", reason, message)])
            return
        rendered_hash = slurmconf.config_hash(files)
        config_hash, config_condition = await self._apply_config(raw, controller, files, rendered_hash)
        for service in [*objects.controller_services(controller), objects.workers_service(controller)]:
            await ensure(self.runtime.kube, service)
        await self._service_monitor(raw, controller)
        # The pod template's hash belongs to ControllerReconfigure once the StatefulSet exists (it rolls the pod
        # and may roll it back): the reconciler leaves it out, so a merge patch never writes an older one back.
        exists = self.caches.get(
            STATEFULSETS, raw["metadata"]["namespace"], objects.controller_statefulset_name(controller)
        )
        desired = objects.controller_statefulset(controller, None if exists else config_hash)
        sts, how = await ensure(self.runtime.kube, desired)
        if how != "unchanged":
            logger.info("Controller %s/%s: StatefulSet %s %s", *key, sts["metadata"]["name"], how)
        self.runtime.clear_warnings(raw)
        active, answered = await self._sync_active(raw, controller)
        conditions = [
            *([config_condition] if config_condition else []),
            self._ready(raw, controller, active, answered),
            (FIELDS_SUPPORTED, "True", "AllSupported", "every field set is reconciled"),
        ]
        await self._status(raw, conditions)

    async def _apply_config(
        self, raw: Obj, controller: Controller, files: dict[str, str], rendered: str
    ) -> tuple[str, tuple[str, str, str, str] | None]:
        """The hash slurmctld should run now, and the ConfigValid condition to write (None: the reconfigure
        workflow owns it). A first config is written at once; a change goes through ControllerReconfigure."""
        ns, name = raw["metadata"]["namespace"], raw["metadata"]["name"]
        cm = self.caches.get(CONFIGMAPS, ns, objects.config_map_name(controller))
        where = f"ConfigMap {objects.config_map_name(controller)} (ClusterName {slurmconf.cluster_name(controller)})"
        if cm is None:
            await ensure(self.runtime.kube, objects.controller_config_map(controller, files))
            logger.info("Controller %s/%s: slurm.conf %s written", ns, name, rendered)
            return rendered, (CONFIG_VALID, "True", "Applied", f"slurm.conf {rendered} in {where}")
        annotations = cm["metadata"].get("annotations") or {}
        applied = str(annotations.get(objects.ANNOTATION_SLURM_CONFIG_HASH) or "")
        if rendered == applied:
            if annotations.get(ANNOTATION_WORKFLOW) and annotations.get(ANNOTATION_VERIFIED) != applied:
                return applied, None  # written by ControllerReconfigure, not verified yet: the workflow says when
            return applied, (CONFIG_VALID, "True", "Applied", f"slurm.conf {applied} in {where}")
        if rendered == annotations.get(ANNOTATION_REJECTED):
            return applied, None  # rejected before: the condition says why; a fix makes a new hash
        if self.temporal is None:
            return applied, (CONFIG_VALID, "False", "NoWorkflowClient", "no Temporal client to reconfigure with")
        inp = ReconfigureInput(
            namespace=ns,
            name=name,
            hash=rendered,
            files=files,
            previous_hash=applied,
            previous_files={k: str(v) for k, v in (cm.get("data") or {}).items()},
            inplace=controller.spec.inplace_reconfigure,
            verify_seconds=self.settings.reconfigure_verify_seconds,
            propagation_seconds=self.settings.config_propagation_seconds,
        )
        wid = reconfigure_workflow_id(ns, name, rendered)
        try:
            await self.temporal.start_workflow(
                "ControllerReconfigure",
                inp,
                id=wid,
                task_queue=self.settings.task_queue,
                id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
            )
            logger.info("Controller %s/%s: slurm.conf %s -> %s by workflow %s", ns, name, applied, rendered, wid)
        except WorkflowAlreadyStartedError:
            pass
        return applied, (
            CONFIG_VALID,
            "True",
            "Reconfiguring",
            f"slurm.conf {rendered} is being applied by workflow {wid}; slurmctld runs {applied} until it is verified",
        )

    def _render(self, raw: Obj, controller: Controller) -> tuple[tuple[str, str, str] | None, dict[str, str]]:
        """(problem as (field, reason, message), files): the config files, or the first problem found."""
        try:
            self._check_keys(raw, controller)
            accounting = self._accounting(raw, controller)
            files = self._files(raw)
            self._check_cluster_name(raw, controller)
        except Problem as problem:
            return (problem.field, problem.reason, str(problem)), {}
        ns, name = raw["metadata"]["namespace"], raw["metadata"]["name"]
        nodesets = [
            NodeSet.model_validate(n)
            for n in self.caches.in_namespace(NODESETS, ns)
            if ((n.get("spec") or {}).get("controllerRef") or {}).get("name") == name
            and not n["metadata"].get("deletionTimestamp")
        ]
        rendered = self._with_defaults(controller)
        problems = slurmconf.validate(rendered, nodesets, accounting, files)
        if problems:
            p = problems[0]
            return (p.field, "InvalidConfig", f"{p.kind} {ns}/{p.name}: {p.field}: {p.message}"), {}
        out = {slurmconf.SLURM_CONF: slurmconf.slurm_conf(rendered, nodesets, accounting, files)}
        if slurmconf.wants_default_cgroup_conf(files):
            cgroup = self.settings.cgroup_conf
            out[slurmconf.CGROUP_CONF] = slurmconf.default_cgroup_conf() if cgroup is None else cgroup.rstrip() + "\n"
        return None, out

    def _check_keys(self, raw: Obj, controller: Controller) -> None:
        ns, name = raw["metadata"]["namespace"], raw["metadata"]["name"]
        for field, ref in (
            ("spec.slurmKeyRef", controller.spec.slurm_key_ref),
            ("spec.jwtKeyRef", controller.spec.jwt_key()),
        ):
            if ref is None or not ref.name or not ref.key:
                raise Problem(field, "KeyMissing", f"Controller {ns}/{name}: {field} (name and key) is required")
            secret = self.caches.get(SECRETS, ns, ref.name)
            if secret is None or ref.key not in (secret.get("data") or {}):
                what = "does not exist" if secret is None else f"has no key {ref.key}"
                raise Problem(
                    field, "KeySecretNotFound", f"Controller {ns}/{name}: {field}: Secret {ns}/{ref.name} {what}"
                )

    def _accounting(self, raw: Obj, controller: Controller) -> Accounting | None:
        ref = controller.spec.accounting_ref
        if ref is None or not ref.name:
            return None
        ns, name = raw["metadata"]["namespace"], raw["metadata"]["name"]
        acct = self.caches.get(ACCOUNTINGS, ns, ref.name)
        if acct is None:
            message = f"Controller {ns}/{name}: spec.accountingRef: Accounting {ns}/{ref.name} does not exist"
            raise Problem("spec.accountingRef", "AccountingNotFound", message)
        return Accounting.model_validate(acct)

    def _files(self, raw: Obj) -> slurmconf.ConfFiles:
        """The file names in the ConfigMaps of the five refs."""
        ns, name = raw["metadata"]["namespace"], raw["metadata"]["name"]
        names: dict[str, tuple[str, ...]] = {}
        for field, refs in _refs(raw.get("spec") or {}).items():
            found: list[str] = []
            for ref in refs:
                cm = self.caches.get(CONFIGMAPS, ns, ref)
                if cm is None:
                    message = f"Controller {ns}/{name}: spec.{field}: ConfigMap {ns}/{ref} does not exist"
                    raise Problem(f"spec.{field}", "ConfigMapNotFound", message)
                found += list((cm.get("data") or {}).keys())
            names[field] = tuple(sorted(found))
        return slurmconf.ConfFiles(
            config=names["configFileRefs"],
            prolog=names["prologScriptRefs"],
            epilog=names["epilogScriptRefs"],
            prolog_slurmctld=names["prologSlurmctldScriptRefs"],
            epilog_slurmctld=names["epilogSlurmctldScriptRefs"],
        )

    def _check_cluster_name(self, raw: Obj, controller: Controller) -> None:
        """Two managed Controllers with one ClusterName would share slurmdbd's records: the younger one waits."""
        ns, name = raw["metadata"]["namespace"], raw["metadata"]["name"]
        cluster = slurmconf.cluster_name(controller)
        for other in self.caches.of(CONTROLLERS).values():
            if other is raw or (other.get("spec") or {}).get("external"):
                continue
            try:
                theirs = slurmconf.cluster_name(Controller.model_validate(other))
            except ValidationError:
                continue
            if theirs == cluster and _older(other, raw):
                where = f"{other['metadata']['namespace']}/{other['metadata']['name']}"
                message = f"Controller {ns}/{name}: ClusterName {cluster} is already Controller {where}'s"
                raise Problem("spec.clusterName", "ClusterNameInUse", message)

    def _with_defaults(self, controller: Controller) -> Controller:
        """The Controller with the operator's `slurm_conf_defaults` lines before its extraConf (a key its extraConf
        sets itself is left out)."""
        defaults = self.settings.slurm_conf_defaults.split()
        if not defaults:
            return controller
        extra = controller.spec.extra_conf or ""
        user_keys = {
            item.split("=", 1)[0].strip().lower() for line in extra.splitlines() for item in line.split() if "=" in item
        }
        kept = [item for item in defaults if item.split("=", 1)[0].strip().lower() not in user_keys]
        spec = controller.spec.model_copy(update={"extra_conf": "\n".join([*kept, extra]).strip("\n")})
        return controller.model_copy(update={"spec": spec})

    async def _service_monitor(self, raw: Obj, controller: Controller) -> None:
        """`metrics.serviceMonitor.enabled` (with `metrics.enabled`): the Controller's ServiceMonitor, made or
        updated; deleted when turned off. Without prometheus-operator's CRD the API is not served: a Warning
        Event says so (upstream skips it silently), and the rest of the Controller is reconciled."""
        monitor = objects.controller_service_monitor(controller)
        uid = str(raw["metadata"]["uid"])
        if not (controller.spec.metrics.enabled and controller.spec.metrics.service_monitor.enabled):
            if self._monitored.get(uid, True):  # one made, or unknown since this operator started
                with contextlib.suppress(KubeNotFound):
                    await self.runtime.kube.delete(path_of(monitor))
                self._monitored[uid] = False
            return
        try:
            await ensure(self.runtime.kube, monitor)
        except KubeNotFound:
            message = (
                f"Controller {raw['metadata']['namespace']}/{raw['metadata']['name']}: spec.metrics.serviceMonitor: "
                "the API monitoring.coreos.com/v1 ServiceMonitor is not served here (install prometheus-operator's "
                "CRDs); slurmctld serves /metrics/jobs, /metrics/nodes, /metrics/partitions, /metrics/scheduler"
            )
            self.runtime.warn_once(raw, "ServiceMonitorUnavailable", message)
            # Nothing here watches for the API to appear (prometheus-operator installed later): look again.
            key = (str(raw["metadata"]["namespace"]), str(raw["metadata"]["name"]))
            self.runtime.requeue_later(self.kind, key, SERVICE_MONITOR_RETRY_SECONDS)
            return
        self._monitored[uid] = True

    async def _ha_problem(self, raw: Obj, controller: Controller) -> tuple[str, str, str] | None:
        """Upstream's HA rule (an existing claim), then what the webhook cannot see: the claim exists and can be
        mounted by every slurmctld (ReadWriteMany)."""
        ns, name = raw["metadata"]["namespace"], raw["metadata"]["name"]
        problems = controller_problems(controller)
        if problems:
            return problems[0].field, problems[0].reason, f"Controller {ns}/{name}: {problems[0].message}"
        if not objects.high_availability(controller):
            return None
        claim = str(controller.spec.persistence.existing_claim)
        field = "spec.persistence.existingClaim"
        pvc = self.caches.get(CLAIMS, ns, claim)
        if pvc is None:
            message = f"Controller {ns}/{name}: {field}: PersistentVolumeClaim {ns}/{claim} does not exist"
            return field, "ClaimNotFound", message
        modes = list((pvc.get("spec") or {}).get("accessModes") or [])
        if "ReadWriteMany" not in modes:
            message = (
                f"Controller {ns}/{name}: {field}: PersistentVolumeClaim {ns}/{claim} has access modes {modes}: "
                "HA needs ReadWriteMany (every slurmctld replica mounts it, on different nodes)"
            )
            return field, "ClaimNotReadWriteMany", message
        return None

    async def _sync_active(self, raw: Obj, controller: Controller) -> tuple[str, bool]:
        """Label the slurmctld pod in control ``controller.slinky.slurm.net/active`` (and no other); its name, and
        whether it was found now (False: with HA, no slurmctld answered /readyz).

        One slurmctld: its pod. With HA: the first pod, in SlurmctldHost order, whose slurmctld answers
        ``/readyz`` with 2xx (a backup in standby answers 500); no answer keeps the label where it is (the
        primary's pod at first), as upstream does."""
        ns, name = raw["metadata"]["namespace"], raw["metadata"]["name"]
        pods = sorted(cluster_pods.pods_of(self.caches, objects.APP_SLURMCTLD, ns, name), key=_ordinal)
        replicas = slurmconf.slurmctld_replicas(controller)
        names = [objects.controller_pod_name(controller, i) for i in range(replicas)]
        labelled = [p["metadata"]["name"] for p in pods if _is_active(p)]
        active = labelled[0] if len(labelled) == 1 and labelled[0] in names else names[0]
        answered = True
        if replicas > 1:
            self.runtime.requeue_later(self.kind, (ns, name), ACTIVE_SYNC_SECONDS, replace=True)
            found = await self._in_control([p for p in pods if p["metadata"]["name"] in names])
            active, answered = found or active, found is not None
        for pod in pods:
            want = pod["metadata"]["name"] == active
            if want == _is_active(pod) or pod["metadata"].get("deletionTimestamp"):
                continue
            patch = {"metadata": {"labels": {wellknown.LABEL_CONTROLLER_ACTIVE: "true" if want else None}}}
            with contextlib.suppress(KubeNotFound):
                await self.runtime.kube.patch(f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}", patch)
            if want:
                logger.info("Controller %s/%s: slurmctld %s is in control", ns, name, active)
        return active, answered

    async def _in_control(self, pods: list[Obj]) -> str | None:
        """The first of `pods` whose slurmctld answers /readyz with 2xx, all asked at once."""

        async def ready(pod: Obj) -> bool:
            ip = (pod.get("status") or {}).get("podIP")
            if not ip or pod["metadata"].get("deletionTimestamp"):
                return False
            try:
                answer = await self._probe.get(f"http://{ip}:{SLURMCTLD_PORT}{objects.READYZ}")
            except httpx.HTTPError:
                return False
            return answer.is_success

        answers = await asyncio.gather(*(ready(p) for p in pods))
        return next((p["metadata"]["name"] for p, ok in zip(pods, answers, strict=True) if ok), None)

    def _ready(self, raw: Obj, controller: Controller, active: str, answered: bool) -> tuple[str, str, str, str]:
        ns, name = raw["metadata"]["namespace"], raw["metadata"]["name"]
        pods = {p["metadata"]["name"]: p for p in cluster_pods.pods_of(self.caches, objects.APP_SLURMCTLD, ns, name)}
        replicas = slurmconf.slurmctld_replicas(controller)
        ready = [n for n, p in sorted(pods.items()) if is_ready(p)]
        ok = active in ready
        if replicas == 1:
            message = f"slurmctld pod {active} is {'ready' if ok else 'not ready yet'}"
        else:
            message = (
                f"slurmctld pod {active} is in control{'' if ok else ' (not ready yet)'}; "
                f"{len(ready)} of {replicas} slurmctld pods ready ({', '.join(ready) or 'none'})"
            )
            if not answered:
                message += (
                    f"; no slurmctld answered /readyz just now (all down or hung, or no route from the operator to "
                    f"the pods): the active label stays on {active}"
                )
        return (READY, "True" if ok else "False", "SlurmctldReady" if ok else "SlurmctldNotReady", message)

    async def _status(self, raw: Obj, conditions: list[tuple[str, str, str, str]]) -> None:
        current = list((raw.get("status") or {}).get("conditions") or [])
        generation = int(raw["metadata"].get("generation") or 0)
        for type_, status, reason, message in conditions:
            current = set_condition(current, type_, status, reason, message, generation)
        if not (raw.get("spec") or {}).get("external"):
            current = cluster_pods.with_pods_healthy(self.runtime, raw, objects.APP_SLURMCTLD, current)
        meta = raw["metadata"]
        await self.runtime.write_status(controller_path(meta["namespace"], meta["name"]), raw, {"conditions": current})


def _ordinal(pod: Obj) -> int:
    tail = str(pod["metadata"]["name"]).rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else 1 << 30


def _is_active(pod: Obj) -> bool:
    return (pod["metadata"].get("labels") or {}).get(wellknown.LABEL_CONTROLLER_ACTIVE) == "true"


def _older(a: Obj, b: Obj) -> bool:
    """Whether `a` was made before `b` (then by namespace and name, for a stable answer)."""

    def order(o: Obj) -> tuple[str, str, str]:
        m = o["metadata"]
        return (str(m.get("creationTimestamp") or ""), str(m.get("namespace")), str(m.get("name")))

    return order(a) < order(b)
