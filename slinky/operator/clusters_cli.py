"""``slinky clusters list | show NAME``: the Slurm clusters of the operator, one per Controller, for users.

A Controller is *managed* (the operator runs its slurmctld from the ``<name>-config`` ConfigMap, whose
annotations say which config hash runs and which reconfigure wrote it) or *external* (slurmctld runs elsewhere;
the operator only talks to its slurmrestd). Everything comes from the Kubernetes API except the Slurm nodes:
those are asked of the cluster's slurmrestd (``GET nodes``) with a JWT minted from the Controller's
``jwtKeyRef`` Secret, at the URL the operator itself uses (see `slurm_target`):

* external: the Controller's ``slinky.slurm.net/slurmrestd-url`` annotation, else ``SLINKY_OPERATOR__REST_URL``,
  else ``SLURM_REST_URL`` (``SLINKY_SLURM__REST_URL``);
* managed: its oldest RestApi's Service ``<restapi>-restapi.<namespace>:6820`` by DNS name or, with
  ``SLINKY_OPERATOR__SERVICE_ADDRESSES=endpoints`` (a client outside cluster DNS: the dev stack), a ready address
  of that Service's Endpoints.

A Slurm that cannot be asked is never an error: `list` prints ``?`` in the NODES column (and the reason on
stderr), `show` says why in one line. A table by default, ``-o json`` for scripts. Any other error is one line
on stderr and exit code 1. The operator's workers are not imported here (the core never imports them): the
URL and key resolution of ``workers/operator/slurm_clients.py`` is written again in `slurm_target`.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import sys
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

import httpx
from pydantic import ValidationError

from slinky import hostlist, wellknown
from slinky.clients.errors import KubeNotFound, SlinkyError
from slinky.clients.kube import KubeClient
from slinky.clients.slurm import Node, SlurmApi, SlurmClient
from slinky.clients.slurm.jwt import MintedToken
from slinky.config import Settings
from slinky.operator import cluster_objects as objects
from slinky.operator import slurm_state
from slinky.operator.api.base import API_VERSION
from slinky.operator.api.controller import Controller
from slinky.operator.nodesets_cli import (  # the operator CLIs' shared table, time and flag helpers
    CliError,
    _namespace,
    _now,
    _one_line,
    _output_flag,
    _parse_time,
    _print_json,
    _table,
    human_age,
    read_pods,
)
from slinky.operator.reconfigure import ANNOTATION_RECONFIGURED_AT, ANNOTATION_REJECTED, ANNOTATION_WORKFLOW
from slinky.operator.slurmconf import cluster_name

__all__ = [
    "SlurmNotAsked",
    "SlurmTarget",
    "Sources",
    "accounting_status",
    "add_parser",
    "cluster_detail",
    "cluster_row",
    "component_selector",
    "config_info",
    "daemon_pod_row",
    "node_counts",
    "nodes_by_state",
    "render_list",
    "render_show",
    "run",
    "slurm_target",
]

API_ROOT = f"/apis/{API_VERSION}"
RESTAPI_PORT = 6820
READY = "Ready"
CONDITION_ORDER = ("ConfigValid", "Ready", "FieldsSupported")
"""The Controller reconciler's conditions, printed first and in this order; any other one after them."""
SLURM_TIMEOUT = 5.0
"""Per request to slurmrestd; the whole Slurm read of one cluster gets `SLURM_DEADLINE`."""
SLURM_DEADLINE = 8.0

Obj = dict[str, Any]
Row = dict[str, Any]
DaemonKind = Literal["slurmctld", "slurmrestd", "slurmdbd", "login", "slurmd"]


# ------------------------------------------------------------------------------------------ parser
def add_parser(sub: Any) -> None:
    """Add the ``clusters`` area to the top-level sub-parsers."""
    parser: argparse.ArgumentParser = sub.add_parser("clusters", help="the operator's Slurm clusters (Controllers)")
    cmds = parser.add_subparsers(dest="clusters_command", required=True, metavar="{list,show}")

    lst = cmds.add_parser("list", help="Controllers: mode, ClusterName, config hash, readiness, Slurm node counts")
    scope = lst.add_mutually_exclusive_group()
    scope.add_argument("-n", "--namespace", default=None, help="Kubernetes namespace (default: default)")
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="Controllers of every namespace")
    _output_flag(lst)
    lst.set_defaults(handler=_handler(list_command), command=list_command)

    show = cmds.add_parser("show", help="one cluster: config, conditions, daemon pods, Slurm nodes, accounting")
    show.add_argument("name", help="the Controller's name")
    show.add_argument("-n", "--namespace", default=None, help="Kubernetes namespace (default: default)")
    _output_flag(show)
    show.set_defaults(handler=_handler(show_command), command=show_command)


Command = Callable[[argparse.Namespace, "Sources"], Awaitable[int]]


def _handler(command: Command) -> Callable[[argparse.Namespace], int]:
    def handle(args: argparse.Namespace) -> int:
        return run(command, args, Sources(Settings()))

    return handle


def run(command: Command, args: argparse.Namespace, sources: Sources) -> int:
    """Run one command; any failure a user can act on becomes one line on stderr and exit code 1."""
    return asyncio.run(run_async(command, args, sources))


async def run_async(command: Command, args: argparse.Namespace, sources: Sources) -> int:
    try:
        return await command(args, sources)
    except CliError as err:
        print(f"error: {err}", file=sys.stderr)
    except SlinkyError as err:  # Kubernetes unreachable, refused, or a setting missing
        print(f"error: Kubernetes: {err}", file=sys.stderr)
    except ValidationError as err:  # an object the CRD schema let through but the models refuse
        print(f"error: an object does not match its schema: {_one_line(err)}", file=sys.stderr)
    finally:
        await sources.aclose()
    return 1


# ------------------------------------------------------------------------------------------ sources
@dataclass(frozen=True)
class SlurmTarget:
    """Where a cluster's slurmrestd answers, and the key its JWTs are signed with."""

    url: str
    key: bytes = field(repr=False)


SlurmFactory = Callable[[SlurmTarget], SlurmApi]


def default_slurm_client(target: SlurmTarget) -> SlurmApi:
    """A client that mints its own JWT (user `slurm`, as the operator) and gives up quickly: no retries."""
    token = MintedToken(read_key=lambda: target.key)
    return SlurmClient(
        target.url, token=token, timeout_seconds=SLURM_TIMEOUT, connect_timeout_seconds=3.0, read_retries=0
    )


@dataclass
class Sources:
    """Where commands read from: the API server and each cluster's slurmrestd (tests hand in a client on a mock
    transport and a factory of Slurm clients)."""

    settings: Settings
    kube: KubeClient | None = None
    slurm: SlurmFactory = default_slurm_client
    _owned: list[KubeClient] = field(default_factory=list, init=False)

    def kube_client(self) -> KubeClient:
        if self.kube is None:
            try:
                self.kube = KubeClient.from_kubeconfig(self.settings.kube.kubeconfig)
            except (OSError, ValueError, KeyError) as err:
                raise CliError(f"Kubernetes: cannot load the kubeconfig: {err}") from err
            self._owned.append(self.kube)
        return self.kube

    async def aclose(self) -> None:
        for kube in self._owned:
            await kube.aclose()
        self._owned.clear()


# ------------------------------------------------------------------------------------------ reading
def _path(plural: str, namespace: str | None, name: str | None = None) -> str:
    path = f"{API_ROOT}/namespaces/{namespace}/{plural}" if namespace else f"{API_ROOT}/{plural}"
    return f"{path}/{name}" if name else path


CRD_MISSING = f"the Controller CRD is not installed (the API server serves no controllers.{API_VERSION.split('/')[0]})"


async def _crd_missing(kube: KubeClient) -> bool:
    try:
        discovery = await kube.get(API_ROOT)
    except KubeNotFound:
        return True
    return not any(r.get("name") == "controllers" for r in discovery.get("resources") or [])


async def read_controllers(kube: KubeClient, namespace: str | None) -> list[Obj]:
    try:
        listing = await kube.list_all(_path("controllers", namespace))
    except KubeNotFound as err:
        raise CliError(CRD_MISSING) from err
    return sorted(listing.get("items") or [], key=lambda o: (o["metadata"]["namespace"], o["metadata"]["name"]))


async def read_controller(kube: KubeClient, namespace: str, name: str) -> Obj:
    try:
        return await kube.get(_path("controllers", namespace, name))
    except KubeNotFound as err:
        if await _crd_missing(kube):
            raise CliError(CRD_MISSING) from err
        raise CliError(f"Controller {name!r} not found in namespace {namespace!r}") from err


async def _get_or_none(kube: KubeClient, path: str) -> Obj | None:
    try:
        return await kube.get(path)
    except KubeNotFound:
        return None


async def _items(kube: KubeClient, path: str, params: Mapping[str, Any] | None = None) -> list[Obj]:
    """The listing's items; none when the kind is not served (a CRD not installed)."""
    try:
        listing = await kube.list_all(path, params)
    except KubeNotFound:
        return []
    return list(listing.get("items") or [])


async def read_config_map(kube: KubeClient, controller: Obj) -> Obj | None:
    """The managed Controller's ``<name>-config`` ConfigMap (None: external, or not written yet)."""
    if _external(controller):
        return None
    meta = controller["metadata"]
    return await _get_or_none(kube, f"/api/v1/namespaces/{meta['namespace']}/configmaps/{meta['name']}-config")


def _naming(items: Iterable[Obj], controller: str) -> list[Obj]:
    """The objects whose spec.controllerRef names `controller`, not being deleted, by name."""
    mine = [
        o
        for o in items
        if ((o.get("spec") or {}).get("controllerRef") or {}).get("name") == controller
        and not o["metadata"].get("deletionTimestamp")
    ]
    return sorted(mine, key=lambda o: o["metadata"]["name"])


async def slurm_target(kube: KubeClient, controller: Obj, settings: Settings) -> SlurmTarget:
    """The slurmrestd URL and JWT key of a Controller, as the operator finds them
    (``workers/operator/slurm_clients.py``).

    Raises:
        SlurmNotAsked: No URL (no RestApi, no ready slurmrestd) or no key (no jwtKeyRef, Secret or key in it).
    """
    meta = controller["metadata"]
    ns, name = meta["namespace"], meta["name"]
    if _external(controller):
        annotations = meta.get("annotations") or {}
        url = str(
            annotations.get(wellknown.ANNOTATION_CONTROLLER_REST_URL)
            or settings.operator.rest_url
            or settings.slurm.rest_url
        )
    else:
        url = await _managed_url(kube, ns, name, settings.operator.service_addresses)
    ref = Controller.model_validate(controller).spec.jwt_key()
    if ref is None or not ref.name or not ref.key:
        raise SlurmNotAsked(f"Controller {ns}/{name} has no spec.jwtKeyRef to sign a token with")
    secret = await _get_or_none(kube, f"/api/v1/namespaces/{ns}/secrets/{ref.name}")
    if secret is None:
        raise SlurmNotAsked(f"Secret {ns}/{ref.name} (jwtKeyRef of {name}) does not exist")
    data = (secret.get("data") or {}).get(ref.key)
    if not data:
        raise SlurmNotAsked(f"Secret {ns}/{ref.name} has no key {ref.key}")
    try:
        key = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as err:
        raise SlurmNotAsked(f"Secret {ns}/{ref.name} key {ref.key} is not base64: {err}") from err
    return SlurmTarget(url, key)


async def _managed_url(kube: KubeClient, ns: str, name: str, service_addresses: str) -> str:
    """The oldest RestApi's Service by DNS name, or (``endpoints``) a ready address of its Endpoints."""
    mine = _naming(await _items(kube, _path("restapis", ns)), name)
    if not mine:
        raise SlurmNotAsked(f"no RestApi names Controller {ns}/{name} (a managed cluster is reached by its slurmrestd)")
    oldest = min(mine, key=lambda r: (r["metadata"].get("creationTimestamp") or "", r["metadata"]["name"]))
    service = f"{oldest['metadata']['name']}-restapi"
    if service_addresses != "endpoints":
        return f"http://{service}.{ns}:{RESTAPI_PORT}"
    endpoints = await _get_or_none(kube, f"/api/v1/namespaces/{ns}/endpoints/{service}") or {}
    for subset in endpoints.get("subsets") or []:
        for address in subset.get("addresses") or []:
            return f"http://{address['ip']}:{RESTAPI_PORT}"
    raise SlurmNotAsked(f"RestApi {ns}/{oldest['metadata']['name']} has no ready slurmrestd pod (Endpoints {service})")


class SlurmNotAsked(Exception):
    """Slurm could not be asked; the message says why, in one line."""


@dataclass
class SlurmRead:
    """What slurmrestd said: its nodes, or (`nodes` None) why there are none to show."""

    url: str = ""
    nodes: list[Node] | None = None
    problem: str = ""


async def read_slurm(sources: Sources, controller: Obj) -> SlurmRead:
    """The cluster's Slurm nodes; never raises: a Slurm that cannot be asked is a `problem` in one line."""
    try:
        target = await slurm_target(sources.kube_client(), controller, sources.settings)
    except SlurmNotAsked as err:
        return SlurmRead(problem=f"not asked: {err}")
    except SlinkyError as err:  # the API server failed on the RestApis, Endpoints or Secret
        return SlurmRead(problem=f"not asked: Kubernetes: {_one_line(err)}")
    client: SlurmApi | None = None
    try:
        client = sources.slurm(target)
        nodes = await asyncio.wait_for(client.list_nodes(), SLURM_DEADLINE)
    except TimeoutError:
        return SlurmRead(target.url, problem=f"unreachable at {target.url}: no answer in {SLURM_DEADLINE:g}s")
    except Exception as err:  # whatever failed (refused, 401, a bad URL, a bad answer): say it, never crash
        return SlurmRead(target.url, problem=f"unreachable at {target.url}: {_one_line(err)}")
    finally:
        if client is not None:
            try:
                await client.aclose()
            except (httpx.HTTPError, OSError, RuntimeError):
                pass
    return SlurmRead(target.url, nodes=nodes)


@dataclass
class ClusterObjects:
    """A Controller and everything of its cluster `show` prints."""

    controller: Obj
    config_map: Obj | None = None
    accounting: Obj | None = None
    pods: list[tuple[DaemonKind, str, Obj]] = field(default_factory=list)
    """(daemon, the object that made the pod, the pod), in the order `show` prints them."""


_COMPONENTS: dict[str, tuple[str, str]] = {
    "slurmctld": (objects.APP_SLURMCTLD, objects.COMPONENT_CONTROLLER),
    "slurmrestd": (objects.APP_SLURMRESTD, objects.COMPONENT_RESTAPI),
    "slurmdbd": (objects.APP_SLURMDBD, objects.COMPONENT_ACCOUNTING),
    "login": (objects.APP_LOGIN, objects.COMPONENT_LOGIN),
}


def component_selector(daemon: DaemonKind, instance: str) -> str:
    """The label selector of a component's pods, as `cluster_objects.selector_labels` labels them (built from
    the name alone, so an object the models would refuse still shows its pods)."""
    app, component = _COMPONENTS[daemon]
    labels = {wellknown.LABEL_APP: app, wellknown.LABEL_INSTANCE: instance, wellknown.LABEL_COMPONENT: component}
    return ",".join(f"{k}={v}" for k, v in labels.items())


async def _component_pods(kube: KubeClient, ns: str, daemon: DaemonKind, instance: str) -> list[Obj]:
    selector = component_selector(daemon, instance)
    pods = await _items(kube, f"/api/v1/namespaces/{ns}/pods", {"labelSelector": selector})
    return sorted(pods, key=lambda p: p["metadata"]["name"])


async def read_cluster(kube: KubeClient, controller: Obj) -> ClusterObjects:
    """The Controller's ConfigMap, Accounting and daemon pods: slurmctld, slurmrestd of the RestApis naming it,
    slurmdbd of its Accounting, login of the LoginSets naming it, slurmd of the NodeSets naming it."""
    meta = controller["metadata"]
    ns, name = meta["namespace"], meta["name"]
    out = ClusterObjects(controller, config_map=await read_config_map(kube, controller))
    if not _external(controller):
        out.pods += [("slurmctld", name, p) for p in await _component_pods(kube, ns, "slurmctld", name)]
    for raw in _naming(await _items(kube, _path("restapis", ns)), name):
        restapi = raw["metadata"]["name"]
        out.pods += [("slurmrestd", restapi, p) for p in await _component_pods(kube, ns, "slurmrestd", restapi)]
    ref = ((controller.get("spec") or {}).get("accountingRef") or {}).get("name")
    if ref:
        out.accounting = await _get_or_none(kube, _path("accountings", ns, ref))
        if out.accounting is not None and not (out.accounting.get("spec") or {}).get("external"):
            out.pods += [("slurmdbd", ref, p) for p in await _component_pods(kube, ns, "slurmdbd", ref)]
    for raw in _naming(await _items(kube, _path("loginsets", ns)), name):
        login = raw["metadata"]["name"]
        out.pods += [("login", login, p) for p in await _component_pods(kube, ns, "login", login)]
    for raw in _naming(await _items(kube, _path("nodesets", ns)), name):
        out.pods += [("slurmd", raw["metadata"]["name"], p) for p in await read_pods(kube, raw)]
    return out


# ------------------------------------------------------------------------------------------ rows (pure)
def _external(controller: Obj) -> bool:
    return bool((controller.get("spec") or {}).get("external"))


def _age(timestamp: str | None, now: datetime) -> str:
    when = _parse_time(timestamp) if timestamp else None
    return human_age((now - when).total_seconds()) if when else "<unknown>"


def _conditions(obj: Obj | None) -> list[Obj]:
    return list(((obj or {}).get("status") or {}).get("conditions") or [])


def _condition(obj: Obj | None, type_: str) -> Obj | None:
    return next((c for c in _conditions(obj) if c.get("type") == type_), None)


def config_info(controller: Obj, config_map: Obj | None, now: datetime) -> Row:
    """The applied config of a managed Controller, from its ConfigMap's annotations: the hash slurmctld runs,
    when and by which workflow it was last reconfigured (else when the ConfigMap was written), a rejected hash."""
    if _external(controller) or config_map is None:
        return {
            "configMap": "" if _external(controller) else f"{controller['metadata']['name']}-config",
            "hash": "",
            "reconfiguredAt": "",
            "workflow": "",
            "rejectedHash": "",
            "since": "",
            "sinceAge": "",
        }
    meta = config_map["metadata"]
    annotations = meta.get("annotations") or {}
    reconfigured = str(annotations.get(ANNOTATION_RECONFIGURED_AT) or "")
    since = reconfigured or str(meta.get("creationTimestamp") or "")
    return {
        "configMap": meta["name"],
        "hash": str(annotations.get(objects.ANNOTATION_SLURM_CONFIG_HASH) or ""),
        "reconfiguredAt": reconfigured,
        "workflow": str(annotations.get(ANNOTATION_WORKFLOW) or ""),
        "rejectedHash": str(annotations.get(ANNOTATION_REJECTED) or ""),
        "since": since,
        "sinceAge": _age(since, now) if since else "",
    }


def node_counts(nodes: Iterable[Node]) -> dict[str, int]:
    """idle, allocated (ALLOCATED or MIXED), down, drain (draining or drained), as a NodeSet's status counts."""
    counts = slurm_state.counts(n.state for n in nodes)
    return {
        "idle": counts["slurmIdle"],
        "allocated": counts["slurmAllocated"],
        "down": counts["slurmDown"],
        "drain": counts["slurmDrain"],
    }


def nodes_column(counts: Mapping[str, int] | None) -> str:
    """``idle/alloc/down/drain``, or ``?`` when Slurm could not be asked."""
    if counts is None:
        return "?"
    return "/".join(str(counts[k]) for k in ("idle", "allocated", "down", "drain"))


def nodes_by_state(nodes: Iterable[Node]) -> list[Row]:
    """The nodes grouped by their whole state (``IDLE``, ``MIXED+DRAIN``, ...) as sinfo groups them, most first."""
    groups: dict[str, list[str]] = {}
    for node in nodes:
        groups.setdefault("+".join(node.state) or "UNKNOWN", []).append(node.name)
    rows = [{"state": s, "count": len(names), "nodes": hostlist.compress(names)} for s, names in groups.items()]
    return sorted(rows, key=lambda r: (-r["count"], r["state"]))


def _ready_column(controller: Obj) -> str:
    if _external(controller):
        return ""
    cond = _condition(controller, READY)
    return str(cond.get("status") or "Unknown") if cond else "Unknown"


def cluster_row(controller: Obj, config_map: Obj | None, slurm: SlurmRead, now: datetime) -> Row:
    """One `list` row (JSON-ready; `render_list` prints it)."""
    meta = controller["metadata"]
    config = config_info(controller, config_map, now)
    counts = node_counts(slurm.nodes) if slurm.nodes is not None else None
    managed_without_config = not _external(controller) and config_map is None
    return {
        "namespace": meta["namespace"],
        "name": meta["name"],
        "mode": "external" if _external(controller) else "managed",
        "clusterName": cluster_name(Controller.model_validate(controller)),
        "config": "<none>" if managed_without_config else config["hash"],
        "reconfigured": config["sinceAge"],
        "ready": _ready_column(controller),
        "nodes": nodes_column(counts),
        "nodeCounts": counts,
        "slurmUrl": slurm.url,
        "slurmProblem": slurm.problem,
        "age": _age(meta.get("creationTimestamp"), now),
    }


def daemon_pod_row(daemon: DaemonKind, owner: str, pod: Obj, now: datetime) -> Row:
    """One daemon pod: which daemon, which object made it, phase, ready, restarts, pod IP and node."""
    meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    restarts = sum(int(s.get("restartCount") or 0) for s in status.get("containerStatuses") or [])
    return {
        "daemon": daemon,
        "owner": owner,
        "name": meta["name"],
        "phase": "Terminating" if meta.get("deletionTimestamp") else status.get("phase", "Unknown"),
        "ready": ready,
        "restarts": restarts,
        "podIP": status.get("podIP", ""),
        "node": spec.get("nodeName", ""),
        "age": _age(meta.get("creationTimestamp"), now),
    }


def accounting_status(controller: Obj, accounting: Obj | None, pods: Sequence[Row]) -> Row:
    """``reachable`` / ``not configured`` / ``unreachable`` / ``external``, and why.

    A managed Accounting is reachable when a slurmdbd pod is ready and its ``Ready`` condition (when the
    Accounting has one) is not False. `pods` are the slurmdbd rows of `daemon_pod_row`.
    """
    ns = controller["metadata"]["namespace"]
    ref = ((controller.get("spec") or {}).get("accountingRef") or {}).get("name")
    if not ref:
        return {"name": "", "state": "not configured", "detail": "no spec.accountingRef"}
    if accounting is None:
        return {"name": ref, "state": "unreachable", "detail": f"Accounting {ns}/{ref} does not exist"}
    spec = accounting.get("spec") or {}
    if spec.get("external"):
        where = spec.get("externalConfig") or {}
        at = f"{where.get('host', '?')}:{where.get('port', '?')}"
        return {"name": ref, "state": "external", "detail": f"slurmdbd at {at}, not checked from here"}
    ready_pods = [p["name"] for p in pods if p["ready"]]
    cond = _condition(accounting, READY)
    said = ""
    if cond is not None:
        said = f"Ready={cond.get('status')}" + (f" ({cond['reason']})" if cond.get("reason") else "")
    if cond is not None and cond.get("status") == "False":
        message = f": {cond['message']}" if cond.get("message") else ""
        return {"name": ref, "state": "unreachable", "detail": f"{said}{message}"}
    if ready_pods:
        detail = f"slurmdbd pod {', '.join(ready_pods)} ready" + (f", {said}" if said else "")
        return {"name": ref, "state": "reachable", "detail": detail}
    what = f"slurmdbd pod {', '.join(p['name'] for p in pods)} not ready" if pods else "no slurmdbd pod"
    return {"name": ref, "state": "unreachable", "detail": what + (f", {said}" if said else "")}


def _ordered_conditions(controller: Obj, now: datetime) -> list[Row]:
    conditions = _conditions(controller)
    rank = {t: i for i, t in enumerate(CONDITION_ORDER)}
    ordered = sorted(conditions, key=lambda c: rank.get(str(c.get("type")), len(rank)))
    return [
        {
            "type": c.get("type", ""),
            "status": c.get("status", ""),
            "reason": c.get("reason", ""),
            "message": c.get("message", ""),
            "lastTransitionTime": c.get("lastTransitionTime", ""),
            "age": _age(c.get("lastTransitionTime"), now),
        }
        for c in ordered
    ]


def cluster_detail(parts: ClusterObjects, slurm: SlurmRead, now: datetime) -> Row:
    """Everything `show` prints (JSON-ready)."""
    controller = parts.controller
    meta, spec = controller["metadata"], controller.get("spec") or {}
    row = cluster_row(controller, parts.config_map, slurm, now)
    pods = [daemon_pod_row(daemon, owner, pod, now) for daemon, owner, pod in parts.pods]
    external = spec.get("externalConfig") or {}
    return {
        **row,
        "uid": meta.get("uid", ""),
        "created": meta.get("creationTimestamp", ""),
        "externalSlurmctld": f"{external.get('host')}:{external.get('port')}" if external else "",
        "inplaceReconfigure": bool(spec.get("inplaceReconfigure")),
        "configDetail": config_info(controller, parts.config_map, now),
        "conditions": _ordered_conditions(controller, now),
        "pods": pods,
        "slurmNodes": nodes_by_state(slurm.nodes) if slurm.nodes is not None else None,
        "accounting": accounting_status(controller, parts.accounting, [p for p in pods if p["daemon"] == "slurmdbd"]),
    }


# ------------------------------------------------------------------------------------------ rendering (pure)


def _cell(value: Any) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def render_list(rows: Sequence[Row], namespace: str | None) -> str:
    if not rows:
        return f"No Controllers found in namespace {namespace}." if namespace else "No Controllers found."
    headers = ["NAMESPACE", "NAME", "MODE", "CLUSTERNAME", "CONFIG", "RECONFIGURED", "READY", "NODES", "AGE"]
    keys = ["namespace", "name", "mode", "clusterName", "config", "reconfigured", "ready", "nodes", "age"]
    return _table(headers, ([r[k] for k in keys] for r in rows))


def render_show(detail: Row) -> str:
    d, cfg = detail, detail["configDetail"]
    mode = d["mode"]
    if d["externalSlurmctld"]:
        mode += f" (slurmctld at {d['externalSlurmctld']})"
    elif d["mode"] == "managed" and d["inplaceReconfigure"]:
        mode += " (reconfigured in place)"
    lines = [
        f"Name:          {d['name']}",
        f"Namespace:     {d['namespace']}",
        f"Created:       {d['created'] or '-'} ({d['age']} ago)",
        f"Mode:          {mode}",
        f"ClusterName:   {d['clusterName']}",
    ]
    if d["mode"] == "external":
        lines.append("Config:        - (external: the operator does not write its slurm.conf)")
    elif not cfg["since"] and not cfg["hash"]:
        lines.append(f"Config:        none yet (no ConfigMap {cfg['configMap']})")
    else:
        lines.append(f"Config:        {cfg['hash'] or '<no hash>'} (ConfigMap {cfg['configMap']})")
        if cfg["reconfiguredAt"]:
            by = f" by workflow {cfg['workflow']}" if cfg["workflow"] else ""
            lines.append(f"Reconfigured:  {cfg['reconfiguredAt']} ({cfg['sinceAge']} ago){by}")
        else:
            lines.append(f"Reconfigured:  never (config written {cfg['since']}, {cfg['sinceAge']} ago)")
        if cfg["rejectedHash"]:
            runs = f"slurmctld runs {cfg['hash']}; " if cfg["hash"] else ""
            lines.append(f"Rejected:      {cfg['rejectedHash']} (not applied; {runs}ConfigValid says why)")
    lines.append(f"Ready:         {d['ready'] or '- (external)'}")
    lines.append("Conditions:")
    if d["conditions"]:
        rows = [
            [c["type"], c["status"], c["reason"], c["age"], " ".join(c["message"].split())] for c in d["conditions"]
        ]
        lines.append(_table(["TYPE", "STATUS", "REASON", "AGE", "MESSAGE"], rows, "  "))
    elif d["mode"] == "external":
        lines.append("  none (the operator does not reconcile an external Controller)")
    else:
        lines.append("  none yet (no operator has reconciled this Controller)")
    lines.append("Daemon pods:")
    if d["pods"]:
        headers = ["DAEMON", "OF", "NAME", "PHASE", "READY", "RESTARTS", "IP", "NODE", "AGE"]
        keys = ["daemon", "owner", "name", "phase", "ready", "restarts", "podIP", "node", "age"]
        lines.append(_table(headers, ([p[k] for k in keys] for p in d["pods"]), "  "))
    else:
        lines.append("  none")
    counts = d["nodeCounts"]
    if counts is None:
        lines.append(f"Slurm nodes:   unknown: Slurm {d['slurmProblem']}")
    else:
        total = sum(r["count"] for r in d["slurmNodes"])
        lines.append(
            f"Slurm nodes:   {total} at {d['slurmUrl']}: {counts['idle']} idle, {counts['allocated']} allocated, "
            f"{counts['down']} down, {counts['drain']} drain"
        )
        if d["slurmNodes"]:
            by_state = ([r["state"], r["count"], r["nodes"]] for r in d["slurmNodes"])
            lines.append(_table(["STATE", "COUNT", "NODES"], by_state, "  "))
    acct = d["accounting"]
    named = f" (Accounting {acct['name']})" if acct["name"] else ""
    lines.append(f"Accounting:    {acct['state']}{named}: {acct['detail']}")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------ commands


async def list_command(args: argparse.Namespace, sources: Sources) -> int:
    namespace = None if args.all_namespaces else _namespace(args, sources.settings)
    kube = sources.kube_client()
    controllers = await read_controllers(kube, namespace)
    config_maps = await asyncio.gather(*(read_config_map(kube, c) for c in controllers))
    slurms = await asyncio.gather(*(read_slurm(sources, c) for c in controllers))
    now = _now()
    rows = [cluster_row(c, cm, s, now) for c, cm, s in zip(controllers, config_maps, slurms, strict=True)]
    if args.output == "json":
        _print_json(rows)
    else:
        print(render_list(rows, namespace))
    for r in rows:
        if r["slurmProblem"]:
            print(f"note: {r['namespace']}/{r['name']}: NODES ?: Slurm {r['slurmProblem']}", file=sys.stderr)
    return 0


async def show_command(args: argparse.Namespace, sources: Sources) -> int:
    namespace = _namespace(args, sources.settings)
    kube = sources.kube_client()
    controller = await read_controller(kube, namespace, args.name)
    parts, slurm = await asyncio.gather(read_cluster(kube, controller), read_slurm(sources, controller))
    detail = cluster_detail(parts, slurm, _now())
    if args.output == "json":
        _print_json(detail)
    else:
        print(render_show(detail))
    return 0
