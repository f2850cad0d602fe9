"""``slinky workloads list | show NAME | why NAME | cancel NAME``: the bridge's lifecycles, for users.

Thin wrappers over the Temporal API (the same things ``temporal workflow list|describe|query|cancel`` do),
keyed by what users know: a pod (or workload) name and a namespace. NAME is resolved through the pod
(``pod_lifecycle_id``: the ID written on it, its gang's, or ``workload/<namespace>/<pod uid>``), else through the
``SlinkyWorkloadName`` search attribute (e.g. a Job's or a PodGroup's name).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
from collections.abc import Awaitable, Mapping
from datetime import timedelta
from typing import Any
from urllib.parse import quote

from slinky import wellknown
from slinky.bridge.grouping import group_of
from slinky.bridge.models.workload import Phase, WhyPending, workload_workflow_id
from slinky.clients.errors import KubeError, KubeNotFound
from slinky.clients.temporal_rpc import (
    QueryRejected,
    RPCError,
    RPCStatusCode,
    TemporalUnreachable,
    WorkflowRow,
    WorkflowService,
    exit_without_finalizing,
)
from slinky.config import Settings

WORKFLOW_TYPE = "WorkloadWorkflow"
RUNNING = "RUNNING"


DEFAULT_LIMIT = 100
"""Rows ``slinky workloads list`` shows unless asked for more (in visibility's order; the total goes to stderr): rows
come through Temporal's visibility at about 0.5-1 ms each (10,000 took 11 s, 1,000 0.5-1.9 s, 100 0.06 s;
docs/benchmarks.md, "Many open workloads"), so that the first page answers in under a second at any size."""


def add_parser(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser("workloads", help="inspect and act on bridge lifecycles")
    parser.add_argument("-n", "--namespace", default=None, help="Kubernetes namespace (default: bridge's)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    cmds = parser.add_subparsers(dest="workloads_command", required=True)
    lst = cmds.add_parser("list", help="running lifecycles (--all: also finished ones)")
    _common(lst)
    lst.add_argument("--all", action="store_true")
    lst.add_argument(
        "--limit",
        type=int,
        default=DEFAULT_LIMIT,
        help=f"at most this many rows (default {DEFAULT_LIMIT}; 0: all); the total goes to stderr when cut",
    )
    lst.set_defaults(handler=lambda a: _run(_list(a)))
    for name, fn, text in (
        ("show", _show, "status, phase, Slurm job and step of one workload"),
        ("why", _why, "why a workload is not running yet"),
        ("cancel", _cancel, "tear a workload down: pod deleted, Slurm job cancelled"),
    ):
        cmd = cmds.add_parser(name, help=text)
        _common(cmd)
        cmd.add_argument("name", help="pod name, or workload (e.g. Job) name")
        cmd.set_defaults(handler=lambda a, fn=fn: _run(fn(a)))


def _common(cmd: argparse.ArgumentParser) -> None:
    """``-n`` and ``--json`` after the sub-command too (``slinky workloads why NAME -n NS``, as kubectl takes
    them); given before it, they stay as given."""
    cmd.add_argument("-n", "--namespace", default=argparse.SUPPRESS, help="Kubernetes namespace")
    cmd.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON")


class KubeconfigUnreadable(Exception):
    """``KUBECONFIG`` (or ``~/.kube/config``) is missing or not a usable kubeconfig."""


def _run(coro: Any) -> int:
    """Run a command; what goes wrong on the way to Temporal or the API server is one line on stderr, exit 1."""
    try:
        code = asyncio.run(coro)
    except (TemporalUnreachable, RPCError, KubeError, KubeconfigUnreadable) as err:
        print(f"slinky workloads: {err}", file=sys.stderr)
        code = 1
    exit_without_finalizing(code)


async def _temporal(settings: Settings) -> WorkflowService:
    return await WorkflowService.connect(settings.temporal.address, settings.temporal.namespace)


def _namespace(args: argparse.Namespace, settings: Settings) -> str:
    return str(args.namespace or settings.bridge.managed_namespaces[0])


async def _resolve(
    client: Awaitable[WorkflowService], settings: Settings, namespace: str, name: str
) -> tuple[list[str], dict[str, Any] | None]:
    """Workflow IDs for NAME (the pod's own lifecycle, else every lifecycle of that workload name), and the pod
    when NAME is one."""
    # Imported here: ``list`` needs no Kubernetes client (httpx is a tenth of a second of imports).
    from slinky.clients.kube import KubeClient, pod_path

    try:
        kube = KubeClient.from_kubeconfig(settings.kube.kubeconfig)
    except (OSError, ValueError, KeyError) as err:
        raise KubeconfigUnreadable(f"cannot read the kubeconfig ({type(err).__name__}: {err})") from err
    async with kube:
        try:
            pod = await kube.get(pod_path(namespace, name))
        except KubeNotFound:
            pod = None
        if pod is not None:
            group = group_of(pod)
            group_uid = None
            if group is not None and not _claimed_by(pod):
                with contextlib.suppress(KubeNotFound):
                    group_uid = (await kube.get(group.api_path()))["metadata"]["uid"]
            return [pod_lifecycle_id(pod, group_uid)], pod
    query = f"WorkflowType = '{WORKFLOW_TYPE}' AND SlinkyNamespace = '{namespace}' AND SlinkyWorkloadName = '{name}'"
    return [wf.id for wf in await (await client).list(query)], None


def _claimed_by(pod: Mapping[str, Any]) -> str:
    return str(((pod.get("metadata") or {}).get("annotations") or {}).get(wellknown.ANNOTATION_WORKFLOW_ID) or "")


def pod_lifecycle_id(pod: Mapping[str, Any], group_uid: str | None) -> str:
    """The ID of the pod's lifecycle: the one written on the pod once its job was submitted; else, for a gang
    member, its gang's (named by the gang object's UID, ``group_uid``: None when that object does not exist);
    else the pod's own (``workload/<namespace>/<pod uid>``)."""
    claimed, group = _claimed_by(pod), group_of(pod)
    if claimed:
        return claimed
    if group is not None and group_uid:
        return group.workflow_id(group_uid)
    return workload_workflow_id(pod["metadata"]["namespace"], pod["metadata"]["uid"])


NO_LIFECYCLE = (
    "no lifecycle: the bridge has not started one for this pod. It starts one for every pending pod whose"
    " schedulerName is the bridge's, within a second of its creation; a gang member waits until its PodGroup or"
    " LeaderWorkerSet exists (Warning GangObjectInvalid on the pod). Check that the bridge worker runs, and the"
    " pod's Events."
)


WHY_QUERY_SECONDS = 0.5
"""How long ``why`` waits for the lifecycle's own answer (a query, which a worker must run) before it answers
from what the lifecycle last published: its search attributes and the pod's PodScheduled condition. At 10,000
open lifecycles a busy worker answered no query in time (docs/benchmarks.md, "Many open workloads")."""


UNANSWERED = "unknown: the lifecycle did not answer"
"""The ``step`` of a ``why`` answered from records."""


def why_from_records(lifecycle: WorkflowRow, pod: Mapping[str, Any] | None, error: str) -> WhyPending:
    """``why`` without the lifecycle: the phase and job id from its search attributes, the reason and message
    from the pod's PodScheduled condition (which the lifecycle keeps, e.g. "Slurm job 7 is pending: Priority")."""
    first = lifecycle.attribute
    condition: Mapping[str, Any] = {}
    if pod is not None:
        for cond in (pod.get("status") or {}).get("conditions") or []:
            if cond.get("type") == "PodScheduled":
                condition = cond
    job = first("SlinkySlurmJobId")
    try:
        phase = Phase(first("SlinkyPhase"))
    except ValueError:
        phase = Phase.SUBMITTING  # not published yet: the lifecycle has just started
    meta = (pod or {}).get("metadata") or {}
    return WhyPending(
        phase=phase,
        step=f"{UNANSWERED} ({error[:120]})",
        job_id=int(job) if job.isdigit() else None,
        reason=str(condition.get("reason") or ""),
        message=str(condition.get("message") or ""),
        pods=[f"{meta['namespace']}/{meta['name']}"] if "name" in meta and "namespace" in meta else [],
    )


async def _list(args: argparse.Namespace) -> int:
    settings = Settings()
    client = await _temporal(settings)
    query = f"WorkflowType = '{WORKFLOW_TYPE}'"
    if args.namespace:
        query += f" AND SlinkyNamespace = '{args.namespace}'"
    if not args.all:
        query += " AND ExecutionStatus = 'Running'"
    rows = []
    limit = args.limit if args.limit and args.limit > 0 else None
    # The total matters only when the rows fill the limit; asked beside the list, it adds no round trip.
    counting = asyncio.ensure_future(client.count(query)) if limit else None
    for wf in await client.list(query, limit=limit):
        rows.append(
            {
                "namespace": wf.attribute("SlinkyNamespace"),
                "kind": wf.attribute("SlinkyWorkloadKind"),
                "name": wf.attribute("SlinkyWorkloadName"),
                "phase": wf.attribute("SlinkyPhase"),
                "job": wf.attribute("SlinkySlurmJobId"),
                "status": wf.status,
                "workflow_id": wf.id,
            }
        )
    total = await counting if counting else 0
    if limit is not None and len(rows) == limit and total > limit:
        print(f"showing {limit} of {total} lifecycles; --limit 0 lists all", file=sys.stderr)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'NAMESPACE':16} {'KIND':8} {'NAME':28} {'PHASE':11} {'JOB':>7} {'STATUS':10} WORKFLOW")
    for r in rows:
        print(
            f"{r['namespace']:16} {r['kind']:8} {r['name']:28} {r['phase']:11} {r['job']:>7} {r['status']:10} "
            f"{r['workflow_id']}"
        )
    return 0


async def _one(args: argparse.Namespace) -> tuple[WorkflowService, Settings, list[str], dict[str, Any] | None]:
    settings = Settings()
    connecting = asyncio.ensure_future(_temporal(settings))  # connected while the pod is read
    try:
        ids, pod = await _resolve(connecting, settings, _namespace(args, settings), args.name)
        client = await connecting
    finally:
        connecting.cancel()  # a no-op once connected; after a failed read of the pod, nothing is left to ask
    if not ids:
        print(f"no workload named {args.name!r} in namespace {_namespace(args, settings)!r}", file=sys.stderr)
    return client, settings, ids, pod


async def _describe(client: WorkflowService, wid: str, pod: Mapping[str, Any] | None) -> WorkflowRow | None:
    """The lifecycle, or None (said on stderr, naming the pod) when none has that ID."""
    try:
        return await client.describe(wid)
    except RPCError as err:
        if err.status != RPCStatusCode.NOT_FOUND:
            raise
    who = f"{pod['metadata']['namespace']}/{pod['metadata']['name']} ({wid})" if pod else wid
    print(f"{who}: {NO_LIFECYCLE}", file=sys.stderr)
    return None


async def _show(args: argparse.Namespace) -> int:
    client, settings, ids, pod = await _one(args)
    out = []
    found = 0
    for wid in ids:
        desc = await _describe(client, wid, pod)
        if desc is None:
            continue
        found += 1
        item: dict[str, Any] = {"workflow_id": wid, "status": desc.status}
        if desc.status == RUNNING:
            why = WhyPending.model_validate_json(await client.query(wid, "why_pending"))
            item.update(why.model_dump(mode="json"))
        ui = os.environ.get("TEMPORAL_UI_URL")
        if ui:
            item["ui"] = f"{ui}/namespaces/{settings.temporal.namespace}/workflows/{quote(wid, safe='')}"
        out.append(item)
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        for item in out:
            for key, value in item.items():
                print(f"{key:16} {value}")
            print()
    return 0 if found else 2


async def _ask_why(client: WorkflowService, wid: str) -> bytes | Exception:
    """The lifecycle's own answer, or why there is none (no worker answered in time, or it is not running)."""
    try:
        return await client.query(wid, "why_pending", timeout=timedelta(seconds=WHY_QUERY_SECONDS), only_open=True)
    except (RPCError, QueryRejected) as err:
        return err


async def _why(args: argparse.Namespace) -> int:
    client, _, ids, pod = await _one(args)
    found = 0
    for wid in ids:
        # Both at once: on a busy machine each round trip to Temporal counts.
        desc, answer = await asyncio.gather(_describe(client, wid, pod), _ask_why(client, wid))
        if desc is None:
            continue
        found += 1
        if desc.status != RUNNING:
            print(f"{wid}: lifecycle {desc.status.lower() or 'unknown'}{_still_pending(pod)}")
            continue
        if isinstance(answer, Exception):
            # No worker answered in time (all busy, or none running): what the lifecycle last published.
            why = why_from_records(desc, pod, str(answer))
        else:
            why = WhyPending.model_validate_json(answer)
        if args.json:
            print(json.dumps(why.model_dump(mode="json")))
            continue
        job = f"Slurm job {why.job_id}" if why.job_id else "no Slurm job yet"
        if why.step.startswith(UNANSWERED):
            condition = f"{why.reason}: {why.message}" if why.reason else "none"
            print(
                f"{', '.join(why.pods) or wid}: phase {why.phase}, {job}. The lifecycle did not answer within"
                f" {WHY_QUERY_SECONDS:g} s (its worker is busy or down); the pod's PodScheduled condition: {condition}"
            )
            continue
        reason = f", Slurm reason: {why.reason}" if why.reason else ""
        restarted = f" (started again after run {why.previous_run_id} ended)" if why.previous_run_id else ""
        late = (
            f" Not in this job, waiting for the next: {', '.join(why.waiting_members)}." if why.waiting_members else ""
        )
        print(
            f"{', '.join(why.pods)}: phase {why.phase}, step {why.step}, {job}"
            f" ({why.slurm_state or 'not seen'}){reason}. {why.message}{restarted}{late}"
        )
    return 0 if found else 2


def _still_pending(pod: Mapping[str, Any] | None) -> str:
    """For a pod that still waits while its lifecycle has ended: what that means (a gang's next lifecycle
    starts within seconds of its old one's end; if none does, the bridge worker is not running)."""
    if pod is None or (pod.get("spec") or {}).get("nodeName") or (pod.get("metadata") or {}).get("deletionTimestamp"):
        return ""
    if (pod.get("status") or {}).get("phase") not in (None, "", "Pending"):
        return ""
    return (
        "; the pod is still pending: its next lifecycle starts within seconds (ask again), unless no bridge worker runs"
    )


async def _cancel(args: argparse.Namespace) -> int:
    client, _, ids, _ = await _one(args)
    for wid in ids:
        await client.cancel(wid)
        print(f"cancel requested: {wid} (pod deleted, Slurm job cancelled, finalizer removed)")
    return 0 if ids else 2
