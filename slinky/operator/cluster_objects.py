"""Pure builders of the Kubernetes objects of a *managed* Slurm cluster: slurmctld, slurmrestd, slurmdbd, login.

This module owns the objects the operator creates for a Controller (`spec.external` false), a RestApi, an
Accounting (`spec.external` false) and a LoginSet, and the names and labels other code finds them by:

* Controller: the `<name>-config` ConfigMap (slurm.conf, cgroup.conf, ...), the `<name>-controller` Service,
  the headless `<name>-controller-internal` Service and the `<name>-controller` StatefulSet (pods
  `<name>-controller-<i>`, one plus `ha.backups` with `ha.enabled`, container `slurmctld`, the save-state
  volume `statesave`);
* RestApi: the `<name>-restapi` Deployment (container `slurmrestd`) and Service;
* Accounting: the `<name>-accounting` Secret (slurmdbd.conf), StatefulSet (container `slurmdbd`) and Service;
* LoginSet: the `<name>` Deployment (container `login`) and Service.

Everything here is pure: parsed objects (and strings the caller computed: file contents, hashes) in, new
plain dicts out, as the apiserver takes them; no I/O, no Kubernetes calls, inputs never modified. Names,
labels, ports, volumes and probes follow upstream slurm-operator's `internal/builder/{controllerbuilder,
restapibuilder,accountingbuilder,loginbuilder,common,labels}`. Where this module differs from upstream:

* no `reconfigure` sidecar (our reconfigure is a Temporal workflow) and no `logfile` sidecar (our daemons run
  in the foreground and log to stderr; the `slurm-logfile` emptyDir stays so SlurmctldLogFile can be opened);
* the Controller Service selects upstream's `controller.slinky.slurm.net/active` label only with `ha.enabled`
  (the operator moves that label to the slurmctld in control): a single slurmctld is selected by its labels
  alone, so it stays reachable while the operator is away (the operator still labels it active, as upstream);
* no sshd on login pods: no ssh host keys, sshd_config, authorized_keys nor `initconf` container; the login
  container runs sackd (configless, `--conf-server` in its args and in `SACKD_OPTIONS`), with the slurm.key
  projected straight into /etc/slurm;
* no key/config hash annotations that need Secret data (`slurm-key-hash`, `jwt-key-hash`, `sssd-conf-hash`):
  the slurm.conf hash comes in as an argument and is set only without `inplaceReconfigure`;
* selectors carry `app.kubernetes.io/component` too, objects carry `slinky.slurm.net/cluster` (the
  Controller's name) when it is known, and `kubectl.kubernetes.io/last-applied-configuration` is not copied
  from a CR onto its objects (it would roll the pods on every `kubectl apply`).
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Iterable, Mapping
from typing import Any, Final, Literal

from slinky import wellknown
from slinky.operator import slurmconf, ssh
from slinky.operator.api.accounting import Accounting
from slinky.operator.api.base import ConfigMapKeySelector, SecretKeySelector, ServiceSpec
from slinky.operator.api.controller import Controller
from slinky.operator.api.loginset import LoginSet
from slinky.operator.api.restapi import RestApi
from slinky.operator.pods import SLURMCTLD_PORT, _merge_container, conf_server

Obj = dict[str, Any]
Kind = Literal["controller", "restapi", "accounting", "login"]
"""A component, as `selector_labels` takes it."""
ClusterObject = Controller | RestApi | Accounting | LoginSet

# Label values and keys missing from slinky.wellknown (upstream `internal/builder/labels/labels.go`).
APP_SLURMCTLD: Final = "slurmctld"
APP_SLURMRESTD: Final = "slurmrestd"
APP_SLURMDBD: Final = "slurmdbd"
APP_LOGIN: Final = "login"
COMPONENT_CONTROLLER: Final = "controller"
COMPONENT_RESTAPI: Final = "restapi"
COMPONENT_ACCOUNTING: Final = "accounting"
COMPONENT_LOGIN: Final = "login"

# Annotations (upstream `controller_app.go`, `accounting_app.go`).
ANNOTATION_SLURM_CONFIG_HASH: Final = wellknown.PREFIX_SLINKY + "slurm-config-hash"
"""On the `<name>-config` ConfigMap, and on the slurmctld pod template unless `inplaceReconfigure`."""
ANNOTATION_SLURMDBD_CONF_HASH: Final = wellknown.PREFIX_SLINKY + "slurmdbd-conf-hash"
"""On the slurmdbd pod template when the caller passes the slurmdbd.conf hash."""
_NOT_COPIED_ANNOTATIONS: Final = frozenset({"kubectl.kubernetes.io/last-applied-configuration"})

# Users, volumes, paths and ports (upstream `internal/builder/common/const.go` and the builders).
SLURM_UID: Final = 401
"""SlurmUser's uid and gid in upstream's images: slurmctld and slurmdbd run as it."""
SLURMRESTD_UID: Final = 65534
"""slurmrestd runs as `nobody` (it refuses root and SlurmUser)."""
SLURM_ETC_VOLUME: Final = "slurm-etc"
STATESAVE_VOLUME: Final = "statesave"
PIDFILE_VOLUME: Final = "run"
PIDFILE_DIR: Final = "/run"
AUTH_SOCKET_VOLUME: Final = "slurm-authsocket"
SLURMCTLD_AUTH_SOCKET_DIR: Final = "/run/slurmctld"
LOGFILE_VOLUME: Final = "slurm-logfile"
SLURM_KEY_FILE: Final = "slurm.key"
JWT_KEY_FILE: Final = "jwt.key"
JWKS_FILE: Final = "jwks.json"
LIVEZ: Final = "/livez"
READYZ: Final = "/readyz"
SACKD_VOLUME: Final = "sackd-dir"
SACKD_DIR: Final = "/run/slurm"
SACKD_SOCKET_PATH: Final = f"{SACKD_DIR}/sack.socket"
SSSD_CONF_VOLUME: Final = "sssd-conf"
SSSD_CONF_FILE: Final = "sssd.conf"
SSSD_CONF_PATH: Final = f"/etc/sssd/{SSSD_CONF_FILE}"
LOGIN_PORT: Final = 22
"""The login Service's default port (upstream's sshd port); the container port is named `login`."""
CLUSTER_DOMAIN: Final = "cluster.local"
"""Kubernetes' default cluster domain (upstream reads it from /etc/resolv.conf; a pure builder cannot)."""
DEFAULT_STATESAVE_ACCESS_MODES: Final = ("ReadWriteOnce",)
DEFAULT_STATESAVE_STORAGE: Final = "4Gi"
"""PVC defaults of upstream's Helm chart (`controller.persistence`); the operator itself sets none."""
SLURMRESTD_SECURITY: Final = "disable_unshare_files,disable_unshare_sysv"

_PROBE_HANDLERS: Final = frozenset({"exec", "httpGet", "tcpSocket", "grpc"})
_PROBES: Final = ("startupProbe", "readinessProbe", "livenessProbe")
_KINDS: Final[dict[str, tuple[str, str, type[ClusterObject]]]] = {
    "controller": (APP_SLURMCTLD, COMPONENT_CONTROLLER, Controller),
    "restapi": (APP_SLURMRESTD, COMPONENT_RESTAPI, RestApi),
    "accounting": (APP_SLURMDBD, COMPONENT_ACCOUNTING, Accounting),
    "login": (APP_LOGIN, COMPONENT_LOGIN, LoginSet),
}


# Names. The reconcilers find the objects by these.


def _name(obj: ClusterObject) -> str:
    return str(obj.metadata.get("name") or "")


def _namespace(obj: ClusterObject) -> str:
    return str(obj.metadata.get("namespace") or "default")


def controller_statefulset_name(controller: Controller) -> str:
    """`<name>-controller`: the StatefulSet (and the Service, as upstream's `Key()`)."""
    return f"{_name(controller)}-controller"


def controller_service_name(controller: Controller) -> str:
    """`<name>-controller`: the Service slurmd, sackd and slurmrestd reach slurmctld by."""
    return controller_statefulset_name(controller)


def controller_internal_service_name(controller: Controller) -> str:
    """`<name>-controller-internal`: the headless governing Service of the StatefulSet."""
    return f"{controller_statefulset_name(controller)}-internal"


def controller_pod_name(controller: Controller, ordinal: int = 0) -> str:
    """`<name>-controller-<ordinal>`: the StatefulSet's pod, its hostname and SlurmctldHost."""
    return f"{controller_statefulset_name(controller)}-{ordinal}"


def config_map_name(controller: Controller) -> str:
    """`<name>-config`: slurm.conf, cgroup.conf and the other files of /etc/slurm."""
    return f"{_name(controller)}-config"


def workers_service_name(controller: str) -> str:
    """`<controller>-workers`: the headless Service of the NodeSet pods (their `subdomain`, see `pods.py`)."""
    return f"{controller}-workers"


def restapi_deployment_name(restapi: RestApi) -> str:
    return f"{_name(restapi)}-restapi"


def restapi_service_name(restapi: RestApi) -> str:
    """`<name>-restapi`, port 6820."""
    return restapi_deployment_name(restapi)


def accounting_statefulset_name(accounting: Accounting) -> str:
    return f"{_name(accounting)}-accounting"


def accounting_service_name(accounting: Accounting) -> str:
    """`<name>-accounting`, port 6819: AccountingStorageHost in slurm.conf, the StatefulSet's serviceName."""
    return accounting_statefulset_name(accounting)


def accounting_secret_name(accounting: Accounting) -> str:
    """`<name>-accounting`: the Secret holding slurmdbd.conf (upstream's `ConfigKey()`)."""
    return accounting_statefulset_name(accounting)


def accounting_pod_name(accounting: Accounting) -> str:
    """`<name>-accounting-0`: slurmdbd's pod and hostname (DbdHost in slurmdbd.conf)."""
    return f"{accounting_statefulset_name(accounting)}-0"


def loginset_deployment_name(loginset: LoginSet) -> str:
    """The LoginSet's own name, as upstream."""
    return _name(loginset)


def loginset_service_name(loginset: LoginSet) -> str:
    return loginset_deployment_name(loginset)


# Labels and metadata.


def selector_labels(kind: Kind, obj: ClusterObject) -> dict[str, str]:
    """The labels that select a component's pods: upstream's `app.kubernetes.io/name` (slurmctld, slurmrestd,
    slurmdbd, login) and `app.kubernetes.io/instance` (the CR's name), plus `app.kubernetes.io/component`.

    Raises:
        TypeError: `obj` is not the kind of object `kind` names.
    """
    app, component, model = _KINDS[kind]
    if not isinstance(obj, model):
        raise TypeError(f"selector_labels({kind!r}) needs a {model.__name__}, not a {type(obj).__name__}")
    return {wellknown.LABEL_APP: app, wellknown.LABEL_INSTANCE: _name(obj), wellknown.LABEL_COMPONENT: component}


def _labels(kind: Kind, obj: ClusterObject, cluster: str | None) -> dict[str, str]:
    out = selector_labels(kind, obj)
    if cluster:
        out[wellknown.LABEL_CLUSTER] = cluster
    return out


def _cr_labels(obj: ClusterObject) -> dict[str, str]:
    return {str(k): str(v) for k, v in (obj.metadata.get("labels") or {}).items()}


def _cr_annotations(obj: ClusterObject) -> dict[str, str]:
    annotations = obj.metadata.get("annotations") or {}
    return {str(k): str(v) for k, v in annotations.items() if k not in _NOT_COPIED_ANNOTATIONS}


def owner_reference(obj: ClusterObject) -> Obj:
    """The CR as the controlling owner of an object it makes (garbage-collected with it)."""
    return {
        "apiVersion": obj.api_version,
        "kind": obj.kind,
        "name": _name(obj),
        "uid": str(obj.metadata.get("uid") or ""),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _metadata(owner: ClusterObject, name: str, labels: Mapping[str, str], annotations: Mapping[str, str]) -> Obj:
    out: Obj = {"name": name, "namespace": _namespace(owner), "labels": dict(labels)}
    if annotations:
        out["annotations"] = dict(annotations)
    out["ownerReferences"] = [owner_reference(owner)]
    return out


# Merging the user's container and pod template (upstream `common.BuildContainer`, `common.BuildPodTemplate`).


class MissingImage(ValueError):
    """A daemon's container names no image: the operator picks none (upstream's chart sets one per component)."""


_DAEMON_FIELDS: dict[str, str] = {
    "Controller": "slurmctld",
    "RestApi": "slurmrestd",
    "Accounting": "slurmdbd",
    "LoginSet": "login",
}


def image_problem(obj: Controller | RestApi | Accounting | LoginSet) -> str | None:
    """What is wrong with the image of the object's daemon container, or None (checked before anything is made,
    so a pod that could never start is named on the object instead of failing in its StatefulSet)."""
    field = _DAEMON_FIELDS[obj.kind]
    container: Mapping[str, Any] = getattr(obj.spec, field) or {}
    if container.get("image"):
        return None
    return f"spec.{field}.image is required (the {field} image; the operator picks none)"


def _daemon_container(base: Obj, obj: Controller | RestApi | Accounting | LoginSet) -> Obj:
    """`_container` for the object's daemon container, which must name its image.

    Raises:
        MissingImage: It names none.
    """
    if problem := image_problem(obj):
        raise MissingImage(problem)
    return _container(base, getattr(obj.spec, _DAEMON_FIELDS[obj.kind]))


def _container(base: Obj, overlay: Mapping[str, Any]) -> Obj:
    """`base` with the user's container merged in: `pods._merge_container` (the user's fields win except the
    name; env merged by name, volumeMounts by mountPath; the user's `args` appended to ours), plus upstream's rule for
    probes: a user's probe replaces only our probe's handler and the fields it sets (our thresholds stay unless
    overridden)."""
    user = copy.deepcopy(dict(overlay))
    out = _merge_container(copy.deepcopy(base), user)
    for probe in _PROBES:
        if isinstance(base.get(probe), dict) and isinstance(user.get(probe), dict):
            kept = {
                k: v
                for k, v in base[probe].items()
                if k not in _PROBE_HANDLERS or not _PROBE_HANDLERS & user[probe].keys()
            }
            out[probe] = {**copy.deepcopy(kept), **user[probe]}
    return out


def _deep_merge(base: Obj, overlay: Mapping[str, Any]) -> Obj:
    """Maps merged key by key (the overlay wins); lists and scalars replaced, as a strategic merge patch does for
    fields without a merge key."""
    out = copy.deepcopy(base)
    for key, value in overlay.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _by_name(ours: list[Obj], theirs: Iterable[Any], own: str | None) -> list[Obj]:
    """Our items, then the user's: a user item named like one of ours replaces it, except the container `own`,
    which is merged into ours (its name kept)."""
    out = {item["name"]: item for item in ours}
    for item in theirs:
        if not isinstance(item, dict):
            continue
        name = item.get("name")
        if name == own and name in out:
            out[name] = _container(out[name], item)
        else:
            out[str(name)] = copy.deepcopy(item)
    return list(out.values())


def _pod_spec(base: Obj, template: Mapping[str, Any], container: str) -> Obj:
    """The user's PodSpec merged over ours (upstream merges `spec.template.spec` with a strategic merge patch):
    containers, initContainers and volumes by name, maps key by key, anything else replaced."""
    out = copy.deepcopy(base)
    for key, value in template.items():
        if key in {"containers", "initContainers", "volumes"}:
            own = container if key == "containers" else None
            out[key] = _by_name(out.get(key) or [], value or [], own)
        elif isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _pod_template(
    owner: ClusterObject,
    kind: Kind,
    cluster: str | None,
    template_labels: Mapping[str, str] | None,
    template_annotations: Mapping[str, str] | None,
    annotations: Mapping[str, str],
    spec: Obj,
) -> Obj:
    """Pod metadata as upstream: the CR's labels and annotations, the template's, then ours."""
    app = _KINDS[kind][0]
    labels = {**_cr_labels(owner), **(template_labels or {}), **_labels(kind, owner, cluster)}
    merged = {
        **_cr_annotations(owner),
        **(template_annotations or {}),
        **annotations,
        wellknown.ANNOTATION_DEFAULT_CONTAINER: app,
    }
    return {"metadata": {"labels": labels, "annotations": merged}, "spec": spec}


# Volumes.


def _secret_source(ref: SecretKeySelector, path: str, mode: int | None = None) -> Obj:
    item: Obj = {"key": ref.key, "path": path}
    if mode is not None:
        item["mode"] = mode
    return {"secret": {"name": ref.name, "items": [item]}}


def _jwks_source(ref: ConfigMapKeySelector) -> Obj:
    return {"configMap": {"name": ref.name, "items": [{"key": ref.key, "path": JWKS_FILE}]}}


def _projected(name: str, mode: int, sources: list[Obj]) -> Obj:
    return {"name": name, "projected": {"defaultMode": mode, "sources": sources}}


def _memory_dir(name: str) -> Obj:
    return {"name": name, "emptyDir": {"medium": "Memory"}}


def _mount(volume: str, path: str, *, read_only: bool = False, sub_path: str | None = None) -> Obj:
    out: Obj = {"name": volume, "mountPath": path}
    if sub_path is not None:
        out["subPath"] = sub_path
    if read_only:
        out["readOnly"] = True
    return out


def _slurm_security(uid: int) -> tuple[Obj, Obj]:
    """(pod, container) securityContext of a daemon running as `uid` (gid the same)."""
    pod = {"runAsNonRoot": True, "runAsUser": uid, "runAsGroup": uid, "fsGroup": uid}
    return pod, {"runAsNonRoot": True, "runAsUser": uid, "runAsGroup": uid}


# Services (upstream `common.BuildService` and the `*_service.go` builders).


def _service(
    owner: ClusterObject,
    name: str,
    *,
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    selector: Mapping[str, str],
    port: Obj,
    template: ServiceSpec | None = None,
    headless: bool = False,
) -> Obj:
    """A Service: the user's ServiceSpec with our port appended and our selector merged in; no externalIPs
    (CVE-2020-8554, as upstream).

    Raises:
        ValueError: the user's ports repeat our port's name or number.
    """
    spec: Obj = copy.deepcopy(template.spec) if template is not None else {}
    spec.pop("externalIPs", None)
    ports = [*(spec.get("ports") or []), port]
    for field in ("name", "port"):
        values = [p.get(field) for p in ports if isinstance(p, dict)]
        repeated = sorted({str(v) for v in values if values.count(v) > 1})
        if repeated:
            raise ValueError(f"Service {name}: port {field} {', '.join(repeated)} is used by several ports")
    spec["ports"] = ports
    spec["selector"] = {**(spec.get("selector") or {}), **selector}
    if headless:
        spec["clusterIP"] = "None"
        spec["publishNotReadyAddresses"] = True
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(owner, name, labels, annotations),
        "spec": spec,
    }


def _service_port(app: str, template: ServiceSpec | None, default: int) -> Obj:
    port: Obj = {
        "name": app,
        "protocol": "TCP",
        "port": (template.port if template is not None and template.port else default),
        "targetPort": app,
    }
    if template is not None and template.node_port:
        port["nodePort"] = template.node_port
    return port


# Controller.


def _require_managed(obj: Controller | Accounting) -> None:
    if obj.spec.external:
        raise ValueError(f"{obj.kind} {_name(obj)} is external: the operator runs no pods for it")


def _controller_keys(controller: Controller) -> tuple[SecretKeySelector, SecretKeySelector]:
    slurm_key, jwt_key = controller.spec.slurm_key_ref, controller.spec.jwt_key()
    if slurm_key is None or jwt_key is None:
        missing = "spec.slurmKeyRef" if slurm_key is None else "spec.jwtKeyRef"
        raise ValueError(f"Controller {_name(controller)}: {missing} must be set for a managed slurmctld")
    return slurm_key, jwt_key


def _controller_service_meta(controller: Controller, template: ServiceSpec | None) -> tuple[Obj, Obj]:
    service = template.metadata if template is not None else None
    labels = {
        **_cr_labels(controller),
        **((service.labels or {}) if service else {}),
        **_labels("controller", controller, _name(controller)),
    }
    annotations = {**_cr_annotations(controller), **((service.annotations or {}) if service else {})}
    return labels, annotations


def controller_config_map(controller: Controller, files: Mapping[str, str]) -> Obj:
    """The `<name>-config` ConfigMap holding `files` (name -> content: slurm.conf, cgroup.conf, ...), annotated
    with their `slurmconf.config_hash`."""
    _require_managed(controller)
    labels = {**_cr_labels(controller), **_labels("controller", controller, _name(controller))}
    annotations = {**_cr_annotations(controller), ANNOTATION_SLURM_CONFIG_HASH: slurmconf.config_hash(files)}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(controller, config_map_name(controller), labels, annotations),
        "data": dict(files),
    }


def controller_services(controller: Controller) -> list[Obj]:
    """`<name>-controller` (port 6817 `slurmctld`, merged with `spec.service`: slurm.conf's SlurmctldAddr, so
    every client reaches slurmctld through it) and the headless `<name>-controller-internal` that governs the
    StatefulSet (SlurmctldHost's addresses). With HA the first selects only the pod labelled
    `controller.slinky.slurm.net/active`: the slurmctld in control."""
    _require_managed(controller)
    template = controller.spec.service
    selector = selector_labels("controller", controller)
    active = {wellknown.LABEL_CONTROLLER_ACTIVE: "true"} if high_availability(controller) else {}
    labels, annotations = _controller_service_meta(controller, template)
    service = _service(
        controller,
        controller_service_name(controller),
        labels=labels,
        annotations=annotations,
        selector={**selector, **active},
        port=_service_port(APP_SLURMCTLD, template, SLURMCTLD_PORT),
        template=template,
    )
    labels, annotations = _controller_service_meta(controller, None)
    internal = _service(
        controller,
        controller_internal_service_name(controller),
        labels=labels,
        annotations=annotations,
        selector=selector,
        port=_service_port(APP_SLURMCTLD, None, SLURMCTLD_PORT),
        headless=True,
    )
    return [service, internal]


SERVICE_MONITOR_PATHS: Final = ("/metrics/jobs", "/metrics/nodes", "/metrics/partitions", "/metrics/scheduler")
"""What slurmctld serves with `MetricsType=metrics/openmetrics` (upstream's default endpoints)."""


def controller_service_monitor(controller: Controller) -> Obj:
    """The Controller's prometheus-operator ServiceMonitor (named like it, upstream's builder): the Controller's
    Service `<name>-controller` by its labels, port `slurmctld`, http, each of `endpoints` (or slurmctld's four
    openmetrics paths) with the ServiceMonitor's `interval` and `scrapeTimeout` unless the endpoint sets its own."""
    _require_managed(controller)
    monitor = controller.spec.metrics.service_monitor
    own = _labels("controller", controller, _name(controller))
    labels = {**_cr_labels(controller), **(monitor.labels or {}), **own}
    annotations = {**_cr_annotations(controller), **(monitor.annotations or {})}

    def endpoint(path: str, interval: str | None, timeout: str | None) -> Obj:
        out: Obj = {"path": path, "port": APP_SLURMCTLD, "scheme": "http"}
        if interval:
            out["interval"] = interval
        if timeout:
            out["scrapeTimeout"] = timeout
        return out

    if monitor.endpoints:
        endpoints = [
            endpoint(e.path or "/metrics", e.interval or monitor.interval, e.scrape_timeout or monitor.scrape_timeout)
            for e in monitor.endpoints
        ]
    else:
        endpoints = [endpoint(p, monitor.interval, monitor.scrape_timeout) for p in SERVICE_MONITOR_PATHS]
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": _metadata(controller, _name(controller), labels, annotations),
        "spec": {
            "selector": {"matchLabels": selector_labels("controller", controller)},
            "namespaceSelector": {"matchNames": [_namespace(controller)]},
            "endpoints": endpoints,
        },
    }


def statesave_path(controller: Controller) -> str:
    """Where the save-state volume is mounted: slurm.conf's StateSaveLocation, `<spool>/<ClusterName>`."""
    return f"{slurmconf.SLURMCTLD_SPOOL_DIR}/{slurmconf.cluster_name(controller)}"


def _statesave_claim_spec(controller: Controller) -> Obj:
    p = controller.spec.persistence
    resources = copy.deepcopy(p.resources) if p.resources else {"requests": {"storage": DEFAULT_STATESAVE_STORAGE}}
    spec: Obj = {"accessModes": list(p.access_modes or DEFAULT_STATESAVE_ACCESS_MODES), "resources": resources}
    optional = {
        "storageClassName": p.storage_class_name,
        "volumeMode": p.volume_mode,
        "selector": p.selector,
        "volumeName": p.volume_name,
        "dataSource": p.data_source,
        "dataSourceRef": p.data_source_ref,
        "volumeAttributesClassName": p.volume_attributes_class_name,
    }
    spec.update({k: copy.deepcopy(v) for k, v in optional.items() if v is not None})
    return spec


def _statesave(controller: Controller) -> tuple[Obj | None, Obj | None]:
    """(pod volume, volumeClaimTemplate) of the save-state, by `spec.persistence` (upstream's cases). With HA
    every slurmctld must see the same state: only the existing claim will do (`validation.controller_problems`).

    Raises:
        ValueError: HA without persistence and an existing claim.
    """
    p = controller.spec.persistence
    if high_availability(controller) and (p.enabled is False or not p.existing_claim):
        raise ValueError("ha.enabled needs persistence.enabled and persistence.existingClaim (ReadWriteMany)")
    if p.enabled is False:
        return {"name": STATESAVE_VOLUME, "emptyDir": {}}, None
    if p.existing_claim:
        return {"name": STATESAVE_VOLUME, "persistentVolumeClaim": {"claimName": p.existing_claim}}, None
    return None, {"metadata": {"name": STATESAVE_VOLUME}, "spec": _statesave_claim_spec(controller)}


def _extra_config_maps(controller: Controller) -> list[str]:
    spec = controller.spec
    refs = [
        *(spec.config_file_refs or []),
        *(spec.prolog_script_refs or []),
        *(spec.epilog_script_refs or []),
        *(spec.prolog_slurmctld_script_refs or []),
        *(spec.epilog_slurmctld_script_refs or []),
    ]
    return sorted({ref.name for ref in refs if ref.name})


def _controller_volumes(controller: Controller) -> list[Obj]:
    slurm_key, jwt_key = _controller_keys(controller)
    sources: list[Obj] = [
        {"configMap": {"name": config_map_name(controller)}},
        _secret_source(slurm_key, SLURM_KEY_FILE),
        _secret_source(jwt_key, JWT_KEY_FILE),
        *({"configMap": {"name": name}} for name in _extra_config_maps(controller)),
    ]
    if controller.spec.jwks_key_ref is not None:
        sources.append(_jwks_source(controller.spec.jwks_key_ref))
    return [
        _projected(SLURM_ETC_VOLUME, 0o610, sources),
        _memory_dir(LOGFILE_VOLUME),
        _memory_dir(PIDFILE_VOLUME),
        {"name": AUTH_SOCKET_VOLUME, "emptyDir": {}},
    ]


def _http_probe(path: str, **extra: int) -> Obj:
    return {"httpGet": {"path": path, "port": APP_SLURMCTLD}, **extra}


def high_availability(controller: Controller) -> bool:
    """Whether more than one slurmctld runs (`ha.enabled`): a primary and `ha.backups` backups."""
    return slurmconf.slurmctld_replicas(controller) > 1


def _slurmctld_container(controller: Controller) -> Obj:
    _, security = _slurm_security(SLURM_UID)
    # Only the slurmctld in control answers /readyz: with backups, readiness is /livez (upstream's rule), else a
    # backup would never be ready and the StatefulSet's rolling update would wait for it for good.
    readiness = LIVEZ if high_availability(controller) else READYZ
    base: Obj = {
        "name": APP_SLURMCTLD,
        "ports": [{"name": APP_SLURMCTLD, "containerPort": SLURMCTLD_PORT, "protocol": "TCP"}],
        "startupProbe": _http_probe(LIVEZ, failureThreshold=6, periodSeconds=10),
        "readinessProbe": _http_probe(readiness),
        "livenessProbe": _http_probe(LIVEZ, failureThreshold=6, periodSeconds=10),
        "securityContext": security,
        "volumeMounts": [
            _mount(SLURM_ETC_VOLUME, slurmconf.SLURM_ETC_DIR, read_only=True),
            _mount(PIDFILE_VOLUME, PIDFILE_DIR),
            _mount(STATESAVE_VOLUME, statesave_path(controller)),
            _mount(AUTH_SOCKET_VOLUME, SLURMCTLD_AUTH_SOCKET_DIR),
            _mount(LOGFILE_VOLUME, slurmconf.SLURM_LOG_DIR),
        ],
    }
    return _daemon_container(base, controller)


def workers_service(controller: Controller) -> Obj:
    """The NodeSets' headless Service `<controller>-workers` (upstream's ClusterWorkerService): their pods'
    subdomain, so a NodeSet pod's hostname (`cpu-0`) resolves from the cluster's pods."""
    name = _name(controller)
    labels, annotations = _controller_service_meta(controller, None)
    selector = {wellknown.LABEL_APP: wellknown.APP_SLURMD, wellknown.LABEL_CLUSTER: name}
    port = {"name": wellknown.APP_SLURMD, "port": slurmconf.SLURMD_PORT, "targetPort": slurmconf.SLURMD_PORT}
    return _service(
        controller,
        workers_service_name(name),
        labels=labels,
        annotations=annotations,
        selector=selector,
        port=port,
        headless=True,
    )


def _anti_affinity(controller: Controller, spec: Obj) -> Obj:
    """`spec` with upstream's HA rule added: a required pod anti-affinity on the node's hostname, so a primary
    and its backup never share a node (the template's own affinity terms are kept)."""
    out = copy.deepcopy(spec)
    affinity = out.setdefault("affinity", {})
    anti = affinity.setdefault("podAntiAffinity", {})
    terms = anti.setdefault("requiredDuringSchedulingIgnoredDuringExecution", [])
    terms.append(
        {
            "labelSelector": {"matchLabels": selector_labels("controller", controller)},
            "topologyKey": "kubernetes.io/hostname",
        }
    )
    return out


def controller_statefulset(controller: Controller, config_hash: str | None) -> Obj:
    """The `<name>-controller` StatefulSet: slurmctld pods `<name>-controller-<i>`, one, or with `ha.enabled`
    a primary (ordinal 0, SlurmctldHost's first line) and `ha.backups` backups, on different nodes (a required
    pod anti-affinity), all mounting the one existing ReadWriteMany claim as StateSaveLocation.

    Its pods get hostname = pod name and subdomain = `<name>-controller-internal` from the StatefulSet, which
    SlurmctldHost names. The pod template carries `ANNOTATION_SLURM_CONFIG_HASH` = `config_hash` only
    without `inplaceReconfigure`, so a config change rolls the pod; with it, the config is re-read in place.
    `config_hash` None leaves the annotation out (a merge patch then keeps the live one: ControllerReconfigure
    owns it once the StatefulSet exists).
    The save-state volume `statesave` is a volumeClaimTemplate (persistence enabled, no existingClaim), the
    existing claim, or an emptyDir (persistence disabled). `spec.template` is merged into the pod and
    `spec.slurmctld` into the `slurmctld` container. Upstream's `reconfigure` and `logfile` sidecars are left
    out (a Temporal workflow reconfigures; slurmctld logs to stderr).

    Raises:
        ValueError: the Controller is external, or has no slurmKeyRef or jwtKeyRef, or HA lacks an existing claim.
    """
    _require_managed(controller)
    cluster = _name(controller)
    selector = selector_labels("controller", controller)
    volume, claim = _statesave(controller)
    pod_security, _ = _slurm_security(SLURM_UID)
    base: Obj = {
        "automountServiceAccountToken": False,
        "containers": [_slurmctld_container(controller)],
        "securityContext": pod_security,
        "volumes": [*_controller_volumes(controller), *([volume] if volume else [])],
    }
    template = controller.spec.template
    rolls = not controller.spec.inplace_reconfigure and config_hash is not None
    hashes = {ANNOTATION_SLURM_CONFIG_HASH: config_hash} if rolls and config_hash else {}
    replicas = slurmconf.slurmctld_replicas(controller)
    pod_spec = _pod_spec(base, template.spec, APP_SLURMCTLD)
    pod = _pod_template(
        controller,
        "controller",
        cluster,
        template.metadata.labels,
        template.metadata.annotations,
        hashes,
        _anti_affinity(controller, pod_spec) if replicas > 1 else pod_spec,
    )
    labels = {
        **_cr_labels(controller),
        **(template.metadata.labels or {}),
        **_labels("controller", controller, cluster),
    }
    annotations = {**_cr_annotations(controller), **(template.metadata.annotations or {})}
    spec: Obj = {
        "replicas": replicas,
        "revisionHistoryLimit": 0,
        "selector": {"matchLabels": selector},
        "serviceName": controller_internal_service_name(controller),
        "updateStrategy": {"type": "RollingUpdate"},
        "template": pod,
    }
    if claim is not None:
        spec["volumeClaimTemplates"] = [claim]
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": _metadata(controller, controller_statefulset_name(controller), labels, annotations),
        "spec": spec,
    }


# RestApi.


def restapi_args(has_accounting: bool) -> list[str]:
    """Upstream's slurmrestd options before the user's: only the slurmctld plugin without accounting (with it,
    slurmrestd loads every plugin, openapi/slurmdbd included). The listen address comes after the user's."""
    return [] if has_accounting else ["-s", "openapi/slurmctld"]


def restapi_deployment(restapi: RestApi, controller: Controller, has_accounting: bool) -> Obj:
    """The `<name>-restapi` Deployment: `spec.replicas` slurmrestd pods running as nobody (65534), reading
    slurm.conf from the Controller's ConfigMap and authenticating with its slurm.key.

    Raises:
        ValueError: the Controller has no slurmKeyRef.
    """
    slurm_key = controller.spec.slurm_key_ref
    if slurm_key is None:
        raise ValueError(f"Controller {_name(controller)}: spec.slurmKeyRef must be set for slurmrestd")
    cluster = restapi.spec.controller_ref.name
    pod_security, security = _slurm_security(SLURMRESTD_UID)

    def probe(**extra: int) -> Obj:
        return {"tcpSocket": {"port": slurmconf.SLURMRESTD_PORT}, **extra}

    base: Obj = {
        "name": APP_SLURMRESTD,
        "env": [
            {"name": "SLURM_JWT", "value": "daemon"},
            {"name": "SLURMRESTD_SECURITY", "value": SLURMRESTD_SECURITY},
        ],
        "args": restapi_args(has_accounting),
        "ports": [{"name": APP_SLURMRESTD, "containerPort": slurmconf.SLURMRESTD_PORT, "protocol": "TCP"}],
        "startupProbe": probe(failureThreshold=6, periodSeconds=10),
        "livenessProbe": probe(failureThreshold=6, periodSeconds=10),
        "readinessProbe": probe(),
        "securityContext": security,
        "volumeMounts": [_mount(SLURM_ETC_VOLUME, slurmconf.SLURM_ETC_DIR, read_only=True)],
    }
    container = _daemon_container(base, restapi)
    container["args"] = [*container.get("args", []), f"0.0.0.0:{slurmconf.SLURMRESTD_PORT}"]
    config = {
        "configMap": {
            "name": config_map_name(controller),
            "items": [{"key": slurmconf.SLURM_CONF, "path": slurmconf.SLURM_CONF}],
        }
    }
    volumes = [_projected(SLURM_ETC_VOLUME, 0o600, [config, _secret_source(slurm_key, SLURM_KEY_FILE)])]
    pod_spec: Obj = {
        "automountServiceAccountToken": False,
        "containers": [container],
        "securityContext": pod_security,
        "volumes": volumes,
    }
    template = restapi.spec.template
    pod = _pod_template(
        restapi,
        "restapi",
        cluster,
        template.metadata.labels,
        template.metadata.annotations,
        {},
        _pod_spec(pod_spec, template.spec, APP_SLURMRESTD),
    )
    labels = {**_cr_labels(restapi), **(template.metadata.labels or {}), **_labels("restapi", restapi, cluster)}
    annotations = {**_cr_annotations(restapi), **(template.metadata.annotations or {})}
    replicas = restapi.spec.replicas
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(restapi, restapi_deployment_name(restapi), labels, annotations),
        "spec": {
            "replicas": 1 if replicas is None else replicas,
            "revisionHistoryLimit": 0,
            "selector": {"matchLabels": selector_labels("restapi", restapi)},
            "template": pod,
        },
    }


def restapi_service(restapi: RestApi) -> Obj:
    """`<name>-restapi`: port 6820 (`spec.service.port`), metadata from `spec.service` as upstream."""
    template = restapi.spec.service
    cluster = restapi.spec.controller_ref.name
    labels = {**(template.metadata.labels or {}), **_labels("restapi", restapi, cluster)}
    return _service(
        restapi,
        restapi_service_name(restapi),
        labels=labels,
        annotations=template.metadata.annotations or {},
        selector=selector_labels("restapi", restapi),
        port=_service_port(APP_SLURMRESTD, template, slurmconf.SLURMRESTD_PORT),
        template=template,
    )


# Accounting.


def _accounting_keys(accounting: Accounting) -> tuple[SecretKeySelector, SecretKeySelector]:
    slurm_key = accounting.spec.slurm_key_ref
    jwt_key = accounting.spec.jwt_key_ref or accounting.spec.jwt_hs256_key_ref
    if slurm_key is None or jwt_key is None:
        missing = "spec.slurmKeyRef" if slurm_key is None else "spec.jwtKeyRef"
        raise ValueError(f"Accounting {_name(accounting)}: {missing} must be set for a managed slurmdbd")
    return slurm_key, jwt_key


def accounting_secret(accounting: Accounting, slurmdbd_conf_text: str) -> Obj:
    """The `<name>-accounting` Secret with `slurmdbd.conf` (it holds the database password).

    Written as base64 `data` (what the apiserver returns), not upstream's write-only `stringData`, so the
    desired and the live object compare equal."""
    _require_managed(accounting)
    labels = {**_cr_labels(accounting), **_labels("accounting", accounting, None)}
    encoded = base64.b64encode(slurmdbd_conf_text.encode()).decode()
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": _metadata(accounting, accounting_secret_name(accounting), labels, _cr_annotations(accounting)),
        "data": {slurmconf.SLURMDBD_CONF: encoded},
    }


def accounting_statefulset(accounting: Accounting, *, config_hash: str | None = None) -> Obj:
    """The `<name>-accounting` StatefulSet: one slurmdbd pod `<name>-accounting-0` reading slurmdbd.conf, the
    slurm.key and the jwt.key from a projected `slurm-etc` volume. `config_hash` (the slurmdbd.conf hash),
    when given, goes on the pod template as `ANNOTATION_SLURMDBD_CONF_HASH` so a change rolls the pod.

    Raises:
        ValueError: the Accounting is external, or has no slurmKeyRef or jwtKeyRef.
    """
    _require_managed(accounting)
    slurm_key, jwt_key = _accounting_keys(accounting)
    pod_security, security = _slurm_security(SLURM_UID)
    config = {
        "secret": {
            "name": accounting_secret_name(accounting),
            "items": [{"key": slurmconf.SLURMDBD_CONF, "path": slurmconf.SLURMDBD_CONF}],
        }
    }
    sources = [config, _secret_source(slurm_key, SLURM_KEY_FILE), _secret_source(jwt_key, JWT_KEY_FILE)]
    if accounting.spec.jwks_key_ref is not None:
        sources.append(_jwks_source(accounting.spec.jwks_key_ref))
    base: Obj = {
        "name": APP_SLURMDBD,
        "ports": [{"name": APP_SLURMDBD, "containerPort": slurmconf.SLURMDBD_PORT, "protocol": "TCP"}],
        "readinessProbe": {"tcpSocket": {"port": slurmconf.SLURMDBD_PORT}},
        "securityContext": security,
        "volumeMounts": [
            _mount(SLURM_ETC_VOLUME, slurmconf.SLURM_ETC_DIR, read_only=True),
            _mount(PIDFILE_VOLUME, PIDFILE_DIR),
        ],
    }
    pod_spec: Obj = {
        "automountServiceAccountToken": False,
        "containers": [_daemon_container(base, accounting)],
        "securityContext": pod_security,
        "volumes": [_projected(SLURM_ETC_VOLUME, 0o600, sources), _memory_dir(PIDFILE_VOLUME)],
    }
    template = accounting.spec.template
    pod = _pod_template(
        accounting,
        "accounting",
        None,
        template.metadata.labels,
        template.metadata.annotations,
        {ANNOTATION_SLURMDBD_CONF_HASH: config_hash} if config_hash else {},
        _pod_spec(pod_spec, template.spec, APP_SLURMDBD),
    )
    labels = {**_cr_labels(accounting), **(template.metadata.labels or {}), **_labels("accounting", accounting, None)}
    annotations = {**_cr_annotations(accounting), **(template.metadata.annotations or {})}
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": _metadata(accounting, accounting_statefulset_name(accounting), labels, annotations),
        "spec": {
            "podManagementPolicy": "Parallel",
            "replicas": 1,
            "revisionHistoryLimit": 0,
            "selector": {"matchLabels": selector_labels("accounting", accounting)},
            "serviceName": accounting_service_name(accounting),
            "updateStrategy": {"type": "RollingUpdate"},
            "template": pod,
        },
    }


def accounting_service(accounting: Accounting) -> Obj:
    """`<name>-accounting`: port 6819 (`spec.service.port`), merged with `spec.service`."""
    _require_managed(accounting)
    template = accounting.spec.service
    labels = {
        **_cr_labels(accounting),
        **(template.metadata.labels or {}),
        **_labels("accounting", accounting, None),
    }
    annotations = {**_cr_annotations(accounting), **(template.metadata.annotations or {})}
    return _service(
        accounting,
        accounting_service_name(accounting),
        labels=labels,
        annotations=annotations,
        selector=selector_labels("accounting", accounting),
        port=_service_port(APP_SLURMDBD, template, slurmconf.SLURMDBD_PORT),
        template=template,
    )


# LoginSet.


def workers_search_domain(controller: str, namespace: str, cluster_domain: str = CLUSTER_DOMAIN) -> str:
    """`<controller>-workers.<namespace>.svc.<domain>`: with it in a pod's DNS search list, a Slurm node name
    (a NodeSet pod's hostname under that headless Service) resolves, as upstream's login and worker pods do."""
    return f"{workers_service_name(controller)}.{namespace}.svc.{cluster_domain}"


def login_args(controller: Controller) -> list[str]:
    """sackd's configless options: `--conf-server <controller>-controller.<ns>:6817` (or the external one)."""
    return ["--conf-server", conf_server(controller)]


def loginset_ssh_data(loginset: LoginSet) -> dict[str, str]:
    """The LoginSet's `<name>-ssh-config` data: sshd_config (`extraSshdConfig` at the end) and root's
    authorized_keys (`rootSshAuthorizedKeys`)."""
    return {
        ssh.SSHD_CONFIG_FILE: ssh.sshd_config(loginset.spec.extra_sshd_config, login=True),
        ssh.AUTHORIZED_KEYS_FILE: ssh.authorized_keys(loginset.spec.root_ssh_authorized_keys),
    }


def loginset_ssh_config(loginset: LoginSet) -> Obj:
    """The LoginSet's ConfigMap `<name>-ssh-config` (upstream's name), owned by it."""
    cluster = loginset.spec.controller_ref.name
    labels = {**_cr_labels(loginset), **_labels("login", loginset, cluster)}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(loginset, ssh.config_name(_name(loginset)), labels, {}),
        "data": loginset_ssh_data(loginset),
    }


def loginset_host_keys(loginset: LoginSet, keys: Mapping[str, str]) -> Obj:
    """The LoginSet's Secret `<name>-ssh-host-keys` (upstream's name): made once, kept (the same host keys on
    every login pod, and across their replacements)."""
    cluster = loginset.spec.controller_ref.name
    labels = {**_cr_labels(loginset), **_labels("login", loginset, cluster)}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": _metadata(loginset, ssh.host_keys_name(_name(loginset)), labels, {}),
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in keys.items()},
    }


def _login_ssh(loginset: LoginSet) -> tuple[list[Obj], list[Obj]]:
    """(volumeMounts, volumes) of sshd in a login pod: its config and root's authorized_keys from the ConfigMap,
    the host keys from the Secret, each at its own path (subPath: the image's /etc/ssh stays)."""
    name = _name(loginset)
    mounts = [
        _mount(ssh.SSH_CONFIG_VOLUME, ssh.SSHD_CONFIG_PATH, read_only=True, sub_path=ssh.SSHD_CONFIG_FILE),
        _mount(ssh.SSH_CONFIG_VOLUME, ssh.ROOT_AUTHORIZED_KEYS_PATH, read_only=True, sub_path=ssh.AUTHORIZED_KEYS_FILE),
    ]
    items = []
    for key in ssh.HOST_KEY_FILES:
        for file, mode in ((key, 0o600), (f"{key}.pub", 0o644)):
            mounts.append(_mount(ssh.SSH_HOST_KEYS_VOLUME, f"/etc/ssh/{file}", read_only=True, sub_path=file))
            items.append({"key": file, "path": file, "mode": mode})
    configs = [{"key": f, "path": f, "mode": 0o600} for f in (ssh.SSHD_CONFIG_FILE, ssh.AUTHORIZED_KEYS_FILE)]
    volumes = [
        _projected(ssh.SSH_CONFIG_VOLUME, 0o600, [{"configMap": {"name": ssh.config_name(name), "items": configs}}]),
        _projected(ssh.SSH_HOST_KEYS_VOLUME, 0o600, [{"secret": {"name": ssh.host_keys_name(name), "items": items}}]),
    ]
    return mounts, volumes


def loginset_deployment(loginset: LoginSet, controller: Controller, *, cluster_domain: str = CLUSTER_DOMAIN) -> Obj:
    """The LoginSet's Deployment (named like it): `spec.replicas` (0 allowed) login pods whose `login` container
    runs sackd configless against the Controller, with the slurm.key in /etc/slurm and the `sssdConfRef` key
    at /etc/sssd/sssd.conf, and sshd beside it (`SSHD=1`) on port 22 with the LoginSet's host keys, sshd_config
    and root's authorized_keys. No initconf container (see the module docstring).

    Raises:
        ValueError: the Controller has no slurmKeyRef.
    """
    slurm_key = controller.spec.slurm_key_ref
    if slurm_key is None:
        raise ValueError(f"Controller {_name(controller)}: spec.slurmKeyRef must be set for login pods")
    cluster = loginset.spec.controller_ref.name
    args = login_args(controller)
    ssh_mounts, ssh_volumes = _login_ssh(loginset)
    base: Obj = {
        "name": APP_LOGIN,
        "args": args,
        "env": [{"name": "SACKD_OPTIONS", "value": " ".join(args)}, dict(ssh.SSHD_ENV)],
        "ports": [{"name": APP_LOGIN, "containerPort": LOGIN_PORT, "protocol": "TCP"}],
        "readinessProbe": {"exec": {"command": ["test", "-S", SACKD_SOCKET_PATH]}},
        "volumeMounts": [
            _mount(SLURM_ETC_VOLUME, slurmconf.SLURM_ETC_DIR, read_only=True),
            _mount(SACKD_VOLUME, SACKD_DIR),
            _mount(SSSD_CONF_VOLUME, SSSD_CONF_PATH, read_only=True, sub_path=SSSD_CONF_FILE),
            *ssh_mounts,
        ],
    }
    sssd = loginset.spec.sssd_conf_ref
    search = workers_search_domain(cluster, _namespace(loginset), cluster_domain)
    pod_spec: Obj = {
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "containers": [_daemon_container(base, loginset)],
        "dnsConfig": {"searches": [search]},
        "volumes": [
            _projected(SLURM_ETC_VOLUME, 0o600, [_secret_source(slurm_key, SLURM_KEY_FILE)]),
            _memory_dir(SACKD_VOLUME),
            _projected(SSSD_CONF_VOLUME, 0o600, [_secret_source(sssd, SSSD_CONF_FILE, 0o600)]),
            *ssh_volumes,
        ],
    }
    template = loginset.spec.template
    merged = _pod_spec(pod_spec, template.spec, APP_LOGIN)
    # A user's dnsConfig.searches would replace ours (a list): keep the workers' domain first.
    searches = (merged.get("dnsConfig") or {}).get("searches") or []
    merged.setdefault("dnsConfig", {})["searches"] = [search, *(s for s in searches if s != search)]
    conf_hash = {ssh.ANNOTATION_SSHD_CONF_HASH: ssh.config_hash(loginset_ssh_data(loginset))}
    pod = _pod_template(
        loginset, "login", cluster, template.metadata.labels, template.metadata.annotations, conf_hash, merged
    )
    labels = {**_cr_labels(loginset), **(template.metadata.labels or {}), **_labels("login", loginset, cluster)}
    annotations = {**_cr_annotations(loginset), **(template.metadata.annotations or {})}
    replicas = loginset.spec.replicas
    spec: Obj = {
        "replicas": 1 if replicas is None else replicas,
        "revisionHistoryLimit": 0,
        "selector": {"matchLabels": selector_labels("login", loginset)},
        "template": pod,
    }
    if loginset.spec.strategy is not None:
        spec["strategy"] = loginset.spec.strategy.to_wire()
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(loginset, loginset_deployment_name(loginset), labels, annotations),
        "spec": spec,
    }


def loginset_service(loginset: LoginSet) -> Obj:
    """The LoginSet's Service (named like it): port 22 `login` (`spec.service.port`), merged with `spec.service`."""
    template = loginset.spec.service
    cluster = loginset.spec.controller_ref.name
    labels = {**_cr_labels(loginset), **(template.metadata.labels or {}), **_labels("login", loginset, cluster)}
    annotations = {**_cr_annotations(loginset), **(template.metadata.annotations or {})}
    return _service(
        loginset,
        loginset_service_name(loginset),
        labels=labels,
        annotations=annotations,
        selector=selector_labels("login", loginset),
        port=_service_port(APP_LOGIN, template, LOGIN_PORT),
        template=template,
    )
