"""``slinky nodesets list | show NAME | scale-ins [NODESET]``: the operator's NodeSets and their scale-ins, for users.

NodeSets and their pods come from the Kubernetes API; scale-ins are ``NodeSetScaleIn`` workflows, found by a
Temporal visibility query on the search attributes the workflow writes (``SlinkyNamespace``, ``SlinkyNodeSet``,
``SlinkySlurmNode``, ``SlinkyPhase``) and asked what they wait for with their ``status`` query. Every scale-in is
printed with its workflow ID, so ``temporal workflow describe|show|query|update|cancel -w <id>`` works on it.

Settings as every slinky process (``KUBECONFIG``, ``TEMPORAL_ADDRESS``, ``TEMPORAL_NAMESPACE`` or
``SLINKY_...``). A table by default, ``-o json`` for scripts. An error is one line on stderr and exit code 1.
The operator's code is not imported here (the wing rule): workflows are named by their type, query and update
names, and decoded with the models of ``slinky.operator.models``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import sys
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.client import Client, WorkflowExecution, WorkflowExecutionStatus
from temporalio.common import SearchAttributeKey
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError

from slinky import wellknown
from slinky.clients.errors import KubeNotFound, SlinkyError
from slinky.clients.kube import KubeClient
from slinky.clients.temporal_rpc import exit_without_finalizing
from slinky.config import Settings
from slinky.operator.api.base import API_VERSION, Condition
from slinky.operator.api.nodeset import NodeSet
from slinky.operator.models import ScaleInResult, ScaleInStatus
from slinky.operator.pods import selector_string

__all__ = [
    "CliError",
    "Sources",
    "add_parser",
    "human_age",
    "nodeset_detail",
    "nodeset_row",
    "pod_row",
    "ready_column",
    "render_list",
    "render_scale_ins",
    "render_show",
    "run",
    "scale_in_row",
    "scale_ins_query",
    "temporal_commands",
]

WORKFLOW_TYPE = "NodeSetScaleIn"
STATUS_QUERY = "status"
ABORT_UPDATE = "abort"
FORCE_UPDATE = "force"
WORKFLOW_ID_PREFIX = "nodeset-scalein/"
API_ROOT = f"/apis/{API_VERSION}"
PROBLEM_ORDER = ("SpecValid", "ControllerReady")
"""Conditions whose False status names the NodeSet's problem, first one first (the reconcile checks them so)."""
CONNECT_TIMEOUT = 10.0
QUERY_TIMEOUT = timedelta(seconds=5)
"""A `status` query needs a live operator worker; without one the row shows the search attributes only."""

SA_NAMESPACE = SearchAttributeKey.for_keyword("SlinkyNamespace")
SA_NODESET = SearchAttributeKey.for_keyword("SlinkyNodeSet")
SA_SLURM_NODE = SearchAttributeKey.for_keyword("SlinkySlurmNode")
SA_PHASE = SearchAttributeKey.for_keyword("SlinkyPhase")

Obj = dict[str, Any]
Row = dict[str, Any]


class CliError(Exception):
    """What the user is told, as one line on stderr (exit code 1)."""


# ------------------------------------------------------------------------------------------ parser
def add_parser(sub: Any) -> None:
    """Add the ``nodesets`` area to the top-level sub-parsers."""
    parser: argparse.ArgumentParser = sub.add_parser("nodesets", help="the operator's NodeSets and their scale-ins")
    cmds = parser.add_subparsers(dest="nodesets_command", required=True, metavar="{list,show,scale-ins}")

    lst = cmds.add_parser("list", help="NodeSets with replica and Slurm node counts")
    scope = lst.add_mutually_exclusive_group()
    scope.add_argument("-n", "--namespace", default=None, help="Kubernetes namespace (default: default)")
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="NodeSets of every namespace")
    _output_flag(lst)
    lst.set_defaults(handler=_handler(list_command), command=list_command)

    show = cmds.add_parser("show", help="one NodeSet: spec, counts, conditions, pods, running scale-ins")
    show.add_argument("name", help="the NodeSet's name")
    show.add_argument("-n", "--namespace", default=None, help="Kubernetes namespace (default: default)")
    _output_flag(show)
    show.set_defaults(handler=_handler(show_command), command=show_command)

    scale_ins = cmds.add_parser("scale-ins", help="running scale-ins, what each waits for (--all: closed ones too)")
    scale_ins.add_argument("nodeset", nargs="?", default=None, help="only this NodeSet's")
    scale_ins.add_argument("-n", "--namespace", default=None, help="only this namespace's (default: every one)")
    scale_ins.add_argument("--all", action="store_true", help="closed scale-ins too, with their outcome")
    _output_flag(scale_ins)
    scale_ins.set_defaults(handler=_handler(scale_ins_command), command=scale_ins_command)


def _output_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table", help="output format")


Command = Callable[[argparse.Namespace, "Sources"], Awaitable[int]]


def _handler(command: Command) -> Callable[[argparse.Namespace], int]:
    def handle(args: argparse.Namespace) -> int:
        exit_without_finalizing(run(command, args, Sources(Settings())))

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
    finally:
        await sources.aclose()
    return 1


# ------------------------------------------------------------------------------------------ sources
@dataclass
class Sources:
    """Where commands read from: the API server and Temporal (tests hand in a client on a mock transport)."""

    settings: Settings
    kube: KubeClient | None = None
    temporal: Client | None = None
    _owned: list[KubeClient] = field(default_factory=list, init=False)

    def kube_client(self) -> KubeClient:
        if self.kube is None:
            try:
                self.kube = KubeClient.from_kubeconfig(self.settings.kube.kubeconfig)
            except (OSError, ValueError, KeyError) as err:
                raise CliError(f"Kubernetes: cannot load the kubeconfig: {err}") from err
            self._owned.append(self.kube)
        return self.kube

    async def temporal_client(self) -> Client:
        if self.temporal is None:
            address, namespace = self.settings.temporal.address, self.settings.temporal.namespace
            try:
                self.temporal = await asyncio.wait_for(
                    Client.connect(address, namespace=namespace, data_converter=pydantic_data_converter),
                    CONNECT_TIMEOUT,
                )
            except (RuntimeError, TimeoutError, OSError) as err:
                raise CliError(f"Temporal unreachable at {address}: {_one_line(err)}") from err
        return self.temporal

    async def aclose(self) -> None:
        for kube in self._owned:
            await kube.aclose()
        self._owned.clear()


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    return text[:300]


# ------------------------------------------------------------------------------------------ reading
def nodesets_path(namespace: str | None, name: str | None = None) -> str:
    path = f"{API_ROOT}/namespaces/{namespace}/nodesets" if namespace else f"{API_ROOT}/nodesets"
    return f"{path}/{name}" if name else path


async def _crd_missing(kube: KubeClient) -> bool:
    """True when the API server does not serve ``nodesets`` in our group/version (the CRD is not installed)."""
    try:
        discovery = await kube.get(API_ROOT)
    except KubeNotFound:
        return True
    return not any(r.get("name") == "nodesets" for r in discovery.get("resources") or [])


CRD_MISSING = f"the NodeSet CRD is not installed (the API server serves no nodesets.{API_VERSION.split('/')[0]})"


async def read_nodesets(kube: KubeClient, namespace: str | None) -> list[Obj]:
    try:
        listing = await kube.list_all(nodesets_path(namespace))
    except KubeNotFound as err:
        raise CliError(CRD_MISSING) from err
    return sorted(listing.get("items") or [], key=lambda o: (o["metadata"]["namespace"], o["metadata"]["name"]))


async def read_nodeset(kube: KubeClient, namespace: str, name: str) -> Obj:
    try:
        return await kube.get(nodesets_path(namespace, name))
    except KubeNotFound as err:
        if await _crd_missing(kube):
            raise CliError(CRD_MISSING) from err
        raise CliError(f"NodeSet {name!r} not found in namespace {namespace!r}") from err


async def read_pods(kube: KubeClient, nodeset: Obj) -> list[Obj]:
    """The NodeSet's pods: its selector, and owned by this very NodeSet (not an older one of the same name)."""
    meta = nodeset["metadata"]
    selector = (nodeset.get("status") or {}).get("selector") or selector_string(NodeSet.model_validate(nodeset))
    listing = await kube.list_all(f"/api/v1/namespaces/{meta['namespace']}/pods", {"labelSelector": selector})
    uid = meta.get("uid")
    pods = [
        p
        for p in listing.get("items") or []
        if any(r.get("uid") == uid for r in p["metadata"].get("ownerReferences") or [])
    ]
    return sorted(pods, key=lambda p: p["metadata"]["name"])


def scale_ins_query(namespace: str | None = None, nodeset: str | None = None, *, include_closed: bool = False) -> str:
    """The visibility query of NodeSetScaleIn workflows, narrowed by the search attributes the workflow writes."""
    query = f"WorkflowType = {_literal(WORKFLOW_TYPE)}"
    if namespace:
        query += f" AND {SA_NAMESPACE.name} = {_literal(namespace)}"
    if nodeset:
        query += f" AND {SA_NODESET.name} = {_literal(nodeset)}"
    if not include_closed:
        query += " AND ExecutionStatus = 'Running'"
    return query


def _literal(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


async def read_scale_ins(
    client: Client, namespace: str | None, nodeset: str | None, *, include_closed: bool, now: datetime
) -> list[Row]:
    """One row per scale-in: running ones asked with the `status` query, closed ones read from their result."""
    query = scale_ins_query(namespace, nodeset, include_closed=include_closed)
    try:
        executions = [wf async for wf in client.list_workflows(query)]
    except RPCError as err:
        raise CliError(f"Temporal refused the visibility query {query!r}: {_one_line(err)}") from err
    return list(await asyncio.gather(*(_scale_in(client, wf, now) for wf in executions)))


async def _scale_in(client: Client, wf: WorkflowExecution, now: datetime) -> Row:
    live: ScaleInStatus | None = None
    result: ScaleInResult | None = None
    note = ""
    handle = client.get_workflow_handle(wf.id, run_id=wf.run_id, result_type=ScaleInResult)
    try:
        if wf.status == WorkflowExecutionStatus.RUNNING:
            live = await handle.query(STATUS_QUERY, result_type=ScaleInStatus, rpc_timeout=QUERY_TIMEOUT)
        elif wf.status == WorkflowExecutionStatus.COMPLETED:
            result = await handle.result(follow_runs=False, rpc_timeout=QUERY_TIMEOUT)
    except Exception as err:  # whatever went wrong is shown on this row; the other rows still print
        what = "status query" if wf.status == WorkflowExecutionStatus.RUNNING else "result"
        note = f"{what} failed: {_one_line(err)}"
    attrs = wf.typed_search_attributes
    return scale_in_row(
        workflow_id=wf.id,
        run_id=wf.run_id,
        status=wf.status.name if wf.status else "",
        search_attributes={
            key.name: attrs.get(key) or "" for key in (SA_NAMESPACE, SA_NODESET, SA_SLURM_NODE, SA_PHASE)
        },
        start_time=wf.start_time,
        close_time=wf.close_time,
        live=live,
        result=result,
        note=note,
        now=now,
    )


# ------------------------------------------------------------------------------------------ rows (pure)
def human_age(seconds: float) -> str:
    """kubectl's AGE: ``45s``, ``5m30s``, ``45m``, ``3h20m``, ``30h``, ``3d5h``, ``300d``, ``2y``."""
    s = max(0, int(seconds))
    if s < 120:
        return f"{s}s"
    m = s // 60
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    if m < 180:
        return f"{m}m"
    h = m // 60
    if h < 8:
        return f"{h}h{m % 60}m" if m % 60 else f"{h}h"
    if h < 48:
        return f"{h}h"
    d = h // 24
    if d < 8:
        return f"{d}d{h % 24}h" if h % 24 else f"{d}d"
    if d < 730:
        return f"{d}d"
    return f"{d // 365}y"


def _age(timestamp: str | datetime | None, now: datetime) -> str:
    if not timestamp:
        return "<unknown>"
    when = timestamp if isinstance(timestamp, datetime) else _parse_time(timestamp)
    if when is None:
        return "<unknown>"
    return human_age((now - when).total_seconds())


def _parse_time(text: str) -> datetime | None:
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def ready_column(conditions: Sequence[Condition]) -> tuple[str, Condition | None]:
    """("True", None) when the problem conditions (`SpecValid`, `ControllerReady`) hold; else the reason of the
    first False one and that condition. Informational ones (`ScaleInProgress`) do not count.

    ("Unknown", None) when there is no problem condition yet: no operator has reconciled the NodeSet.
    """
    by_type = {c.type: c for c in conditions if c.type in PROBLEM_ORDER}
    for type_ in PROBLEM_ORDER:
        cond = by_type.get(type_)
        if cond is not None and cond.status == "False":
            return cond.reason or f"{type_}=False", cond
    if by_type and all(c.status == "True" for c in by_type.values()):
        return "True", None
    return "Unknown", None


def nodeset_row(obj: Obj, now: datetime) -> Row:
    """One `list` row from a NodeSet as the API server returns it (JSON-ready; `render_list` prints it)."""
    nodeset = NodeSet.model_validate(obj)
    meta, spec, status = obj["metadata"], nodeset.spec, nodeset.status
    ready, problem = ready_column(status.conditions or [])
    return {
        "namespace": meta.get("namespace", ""),
        "name": meta["name"],
        "desired": spec.replicas if spec.replicas is not None else 1,
        "replicas": status.replicas,
        "readyReplicas": status.ready_replicas,
        "updatedReplicas": status.updated_replicas,
        "slurmIdle": status.slurm_idle,
        "slurmAllocated": status.slurm_allocated,
        "slurmDown": status.slurm_down,
        "slurmDrain": status.slurm_drain,
        "ready": ready,
        "problem": problem.model_dump(by_alias=True, exclude_none=True) if problem else None,
        "age": _age(meta.get("creationTimestamp"), now),
        "created": meta.get("creationTimestamp", ""),
    }


def pod_row(pod: Obj, now: datetime) -> Row:
    """One pod of `show`: phase (Terminating as kubectl says it), ready, its Slurm node, the operator's marks."""
    meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
    annotations = meta.get("annotations") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    return {
        "name": meta["name"],
        "phase": "Terminating" if meta.get("deletionTimestamp") else status.get("phase", "Unknown"),
        "ready": ready,
        "slurmNode": spec.get("hostname") or meta["name"],
        "node": spec.get("nodeName", ""),
        "cordon": annotations.get(wellknown.ANNOTATION_POD_CORDON) == "true",
        "deadline": annotations.get(wellknown.ANNOTATION_POD_DEADLINE, ""),
        "scaleInWorkflow": annotations.get(wellknown.ANNOTATION_SCALE_IN_WORKFLOW, ""),
        "age": _age(meta.get("creationTimestamp"), now),
    }


def nodeset_detail(obj: Obj, pods: Iterable[Obj], scale_ins: list[Row] | None, now: datetime) -> Row:
    """Everything `show` prints; `scale_ins` None means Temporal could not be asked."""
    nodeset = NodeSet.model_validate(obj)
    spec, status = nodeset.spec, nodeset.status
    row = nodeset_row(obj, now)
    strategy = spec.update_strategy
    return {
        **row,
        "uid": obj["metadata"].get("uid", ""),
        "generation": obj["metadata"].get("generation", 0),
        "observedGeneration": status.observed_generation,
        "controller": spec.controller_ref.name,
        "scalingMode": spec.scaling_mode,
        "image": str(spec.slurmd.get("image", "")),
        "updateStrategy": strategy.type,
        "maxUnavailable": strategy.rolling_update.max_unavailable,
        "partition": spec.partition.enabled,
        "extraConf": spec.extra_conf or "",
        "selector": status.selector,
        "nodeSetHash": status.node_set_hash,
        "conditions": [
            {**c.model_dump(by_alias=True, exclude_none=True), "age": _age(c.last_transition_time, now)}
            for c in status.conditions or []
        ],
        "pods": [pod_row(p, now) for p in pods],
        "scaleIns": scale_ins,
    }


def scale_in_row(
    *,
    workflow_id: str,
    run_id: str,
    status: str,
    search_attributes: Mapping[str, str],
    start_time: datetime | None,
    close_time: datetime | None,
    live: ScaleInStatus | None,
    result: ScaleInResult | None,
    now: datetime,
    note: str = "",
) -> Row:
    """One scale-in: the `status` query's answer when running, the result when closed, search attributes else."""
    parts = workflow_id.split("/")
    pod_from_id = parts[2] if workflow_id.startswith(WORKFLOW_ID_PREFIX) and len(parts) == 4 else ""
    running = status == WorkflowExecutionStatus.RUNNING.name
    outcome: str = (live.outcome if live else "") or (result.outcome if result else "")
    if not running and not outcome and status != WorkflowExecutionStatus.COMPLETED.name:
        outcome = status.lower()  # terminated, cancelled, failed, timed_out: the workflow did not finish its work
    return {
        "namespace": search_attributes.get(SA_NAMESPACE.name) or (parts[1] if pod_from_id else ""),
        "nodeset": search_attributes.get(SA_NODESET.name, ""),
        "pod": (live.pod if live else "") or pod_from_id,
        "slurmNode": (live.node if live else "")
        or search_attributes.get(SA_SLURM_NODE.name)
        or (result.node if result else ""),
        "phase": (live.phase if live else "") or search_attributes.get(SA_PHASE.name, ""),
        "status": status,
        "cause": live.cause if live else "",
        "waitingFor": live.waiting_for if live else "",
        "nodeStates": live.states if live else [],
        "nodeReason": live.reason if live else "",
        "jobs": live.jobs if live else [],
        "deadline": live.deadline if live else "",
        "forced": live.forced if live else False,
        "cancelledJobs": (live.cancelled_jobs if live else []) or (result.cancelled_jobs if result else []),
        "outcome": outcome,
        "note": note,
        "age": _age(start_time, now),
        "started": start_time.isoformat() if start_time else "",
        "closed": close_time.isoformat() if close_time else "",
        "workflowId": workflow_id,
        "runId": run_id,
    }


def temporal_commands(
    workflow_id: str, address: str, namespace: str, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The `temporal` CLI commands that act on one scale-in, with --address/--namespace only when the CLI
    would not find them in its own environment (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE) or defaults."""
    env = os.environ if environ is None else environ
    flags = ""
    if address != env.get("TEMPORAL_ADDRESS", "") and not (
        "TEMPORAL_ADDRESS" not in env and address in ("localhost:7233", "127.0.0.1:7233")
    ):
        flags += f" --address {shlex.quote(address)}"
    if namespace != env.get("TEMPORAL_NAMESPACE", "default"):
        flags += f" --namespace {shlex.quote(namespace)}"
    w = f"-w {shlex.quote(workflow_id)}{flags}"
    return {
        "status": f"temporal workflow query --name {STATUS_QUERY} {w}",
        "abort": f"temporal workflow update execute --name {ABORT_UPDATE} {w}",
        "force": f"temporal workflow update execute --name {FORCE_UPDATE} {w}",
        "describe": f"temporal workflow describe {w}",
        "history": f"temporal workflow show {w}",
    }


# ------------------------------------------------------------------------------------------ rendering (pure)
def _table(headers: Sequence[str], rows: Iterable[Sequence[Any]], indent: str = "") -> str:
    cells = [[str(h) for h in headers], *([_cell(v) for v in row] for row in rows)]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["   ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    return "\n".join(indent + line for line in lines)


def _cell(value: Any) -> str:
    if value is None or value == "" or value == []:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)


def _printable(text: str) -> str:
    """As written, or JSON-quoted when it holds control characters (a newline in extraConf is the problem)."""
    return text if text.isprintable() else json.dumps(text)


def render_list(rows: Sequence[Row], namespace: str | None) -> str:
    if not rows:
        return f"No NodeSets found in namespace {namespace}." if namespace else "No NodeSets found."
    headers = ["NAME", "REPLICAS", "UPDATED", "IDLE", "ALLOCATED", "DOWN", "DRAIN", "READY", "AGE"]
    keys = ["name", "replicas", "updatedReplicas", "slurmIdle", "slurmAllocated", "slurmDown", "slurmDrain"]
    table = []
    for r in rows:
        values = [r[k] for k in keys]
        values[1] = f"{r['readyReplicas']}/{r['desired']}"
        table.append([*values, r["ready"], r["age"]])
    if namespace is None:
        return _table(["NAMESPACE", *headers], ([r["namespace"], *t] for r, t in zip(rows, table, strict=True)))
    return _table(headers, table)


def render_scale_ins(
    rows: Sequence[Row], commands: Mapping[str, Mapping[str, str]], indent: str = "", *, context: bool = True
) -> str:
    """The scale-in table, then the `temporal` commands that act on the running ones.

    `context=False` leaves out NAMESPACE and NODESET (`show` prints them above the table).
    """
    if not rows:
        return f"{indent}No scale-ins."
    headers = ["NAMESPACE", "NODESET", "POD", "SLURM NODE", "PHASE", "WAITING FOR", "JOBS", "DEADLINE", "OUTCOME"]
    headers += ["AGE", "WORKFLOW ID"]
    table = [
        [
            r["namespace"],
            r["nodeset"],
            r["pod"],
            r["slurmNode"],
            r["phase"],
            r["waitingFor"] or r["note"],
            r["jobs"] or (f"cancelled {_cell(r['cancelledJobs'])}" if r["cancelledJobs"] else ""),
            r["deadline"],
            r["outcome"],
            r["age"],
            r["workflowId"],
        ]
        for r in rows
    ]
    if not context:
        headers, table = headers[2:], [t[2:] for t in table]
    out = [_table(headers, table, indent)]
    running = [r["workflowId"] for r in rows if r["status"] == WorkflowExecutionStatus.RUNNING.name]
    if running:
        one = commands[running[0]] if len(running) == 1 else _placeholder(commands[running[0]], running[0])
        out += [
            "",
            f"{indent}Act on a running scale-in with the temporal CLI:",
            f"{indent}  {one['status']:<{_width(one)}}   what it waits for",
            f"{indent}  {one['abort']:<{_width(one)}}   stop: undrain the node, keep the pod",
            f"{indent}  {one['force']:<{_width(one)}}   cancel the node's jobs now (recorded in the history)",
            f"{indent}  {one['history']:<{_width(one)}}   its history",
        ]
    return "\n".join(out)


def _placeholder(commands: Mapping[str, str], workflow_id: str) -> dict[str, str]:
    quoted = shlex.quote(workflow_id)
    return {k: v.replace(f"-w {quoted}", "-w <WORKFLOW ID>") for k, v in commands.items()}


def _width(commands: Mapping[str, str]) -> int:
    return max(len(commands[k]) for k in ("status", "abort", "force", "history"))


def render_show(detail: Row, commands: Mapping[str, Mapping[str, str]]) -> str:
    d = detail
    lines = [
        f"Name:          {d['name']}",
        f"Namespace:     {d['namespace']}",
        f"Created:       {d['created']} ({d['age']} ago)",
        f"Controller:    {d['controller']}",
        f"Mode:          {d['scalingMode']}, update strategy {d['updateStrategy']}"
        + (f" (maxUnavailable {d['maxUnavailable']})" if d["updateStrategy"] == "RollingUpdate" else ""),
        f"Image:         {d['image'] or '-'}",
        f"Partition:     {'enabled' if d['partition'] else 'disabled'}",
    ]
    if d["extraConf"]:
        lines.append(f"Extra conf:    {_printable(d['extraConf'])}")
    lines += [
        f"Replicas:      {d['desired']} desired, {d['replicas']} current, {d['readyReplicas']} ready, "
        f"{d['updatedReplicas']} updated",
        f"Slurm nodes:   {d['slurmIdle']} idle, {d['slurmAllocated']} allocated, {d['slurmDown']} down, "
        f"{d['slurmDrain']} drain",
        f"Ready:         {d['ready']}",
        f"Selector:      {d['selector'] or '-'}",
        f"Generation:    {d['generation']} (observed {d['observedGeneration']})",
        "Conditions:",
    ]
    if d["conditions"]:
        rows = [[c["type"], c["status"], c.get("reason", ""), c["age"], c.get("message", "")] for c in d["conditions"]]
        lines.append(_table(["TYPE", "STATUS", "REASON", "AGE", "MESSAGE"], rows, "  "))
    else:
        lines.append("  none yet (no operator has reconciled this NodeSet)")
    lines.append("Pods:")
    if d["pods"]:
        headers = ["NAME", "PHASE", "READY", "SLURM NODE", "CORDON", "DEADLINE", "AGE"]
        keys = ["name", "phase", "ready", "slurmNode", "cordon", "deadline", "age"]
        lines.append(_table(headers, ([p[k] for k in keys] for p in d["pods"]), "  "))
    else:
        lines.append("  none")
    lines.append("Running scale-ins:")
    if d["scaleIns"] is None:
        lines.append("  unknown (Temporal could not be asked)")
    else:
        lines.append(render_scale_ins(d["scaleIns"], commands, "  ", context=False))
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------ commands
def _namespace(args: argparse.Namespace, settings: Settings) -> str:
    """-n, else the operator's one watched namespace when it watches exactly one, else kubectl's `default`."""
    if args.namespace:
        return str(args.namespace)
    watched = settings.operator.namespaces
    return watched[0] if len(watched) == 1 else "default"


def _now() -> datetime:
    return datetime.now(UTC)


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2))


async def list_command(args: argparse.Namespace, sources: Sources) -> int:
    namespace = None if args.all_namespaces else _namespace(args, sources.settings)
    now = _now()
    rows = [nodeset_row(o, now) for o in await read_nodesets(sources.kube_client(), namespace)]
    if args.output == "json":
        _print_json(rows)
    else:
        print(render_list(rows, namespace))
    return 0


async def show_command(args: argparse.Namespace, sources: Sources) -> int:
    namespace = _namespace(args, sources.settings)
    kube = sources.kube_client()
    obj = await read_nodeset(kube, namespace, args.name)
    pods = await read_pods(kube, obj)
    now = _now()
    scale_ins: list[Row] | None
    problem = ""
    try:
        client = await sources.temporal_client()
        scale_ins = await read_scale_ins(client, namespace, args.name, include_closed=False, now=now)
    except CliError as err:  # still show what Kubernetes says; the error goes to stderr and the exit code
        scale_ins, problem = None, str(err)
    detail = nodeset_detail(obj, pods, scale_ins, now)
    commands = _commands(scale_ins or [], sources.settings)
    if args.output == "json":
        _print_json({**detail, "scaleInCommands": commands})
    else:
        print(render_show(detail, commands))
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 1
    return 0


async def scale_ins_command(args: argparse.Namespace, sources: Sources) -> int:
    client = await sources.temporal_client()
    rows = await read_scale_ins(client, args.namespace, args.nodeset, include_closed=args.all, now=_now())
    commands = _commands(rows, sources.settings)
    if args.output == "json":
        running = WorkflowExecutionStatus.RUNNING.name
        _print_json([{**r, "commands": commands[r["workflowId"]] if r["status"] == running else {}} for r in rows])
    else:
        print(render_scale_ins(rows, commands))
    return 0


def _commands(rows: Iterable[Row], settings: Settings) -> dict[str, dict[str, str]]:
    t = settings.temporal
    return {r["workflowId"]: temporal_commands(r["workflowId"], t.address, t.namespace) for r in rows}
