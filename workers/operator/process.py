"""The operator process (`python -m workers.operator`; docs/operator.md), in one loop: the controller runtime
with every reconciler on it (Controller, RestApi, Accounting, LoginSet, NodeSet with its shared Slurm node
poll per Controller, Token) and the Temporal worker of the scale-in and reconfigure workflows.

With `SLINKY_LEADER_ELECTION__ENABLED=true` only the replica holding Lease `slinky-operator` runs; the
scale-ins live in Temporal, so a new leader finds them where the old one left them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from datetime import timedelta

from prometheus_client import CollectorRegistry
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest, ListSearchAttributesRequest
from temporalio.client import Client
from temporalio.service import RPCError
from temporalio.worker import UnsandboxedWorkflowRunner, Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from activities.cluster import ClusterActivities
from activities.nodeset import NodeSetActivities
from slinky import telemetry, wellknown
from slinky.clients.errors import KubeError
from slinky.clients.events import EventRecorder
from slinky.clients.kube import KubeClient
from slinky.config import Settings
from slinky.operator.slurm_metrics import Family
from workers import leading
from workers.leading import connect_temporal, run_as_leader
from workers.operator import external_metrics
from workers.operator.accounting import AccountingReconciler
from workers.operator.controller import ControllerReconciler
from workers.operator.loginset import LoginSetReconciler
from workers.operator.metrics import OperatorCollector
from workers.operator.nodeset.reconciler import NodeSetReconciler
from workers.operator.restapi import RestApiReconciler
from workers.operator.runtime import Runtime
from workers.operator.slurm_clients import SlurmClients
from workers.operator.token import TokenReconciler
from workflows.nodeset import SA_NAMESPACE, SA_NODESET, SA_PHASE, SA_SLURM_NODE, NodeSetScaleInWorkflow
from workflows.reconfigure import SA_CONTROLLER, ControllerReconfigureWorkflow
from workflows.scheduled_update import NodeSetScheduledUpdateWorkflow

logger = logging.getLogger(__name__)
"""List+watch streams the runtime keeps open per watched namespace (or once, cluster-wide), besides the one
on nodes: Controllers, RestApis, Accountings, LoginSets, NodeSets, Tokens, NodeSet pods, Secrets, ConfigMaps,
StatefulSets, Deployments (a unit test holds it to the runtime's count)."""


async def ensure_search_attributes(temporal: Client) -> None:
    """Register the scale-in's search attributes when the server lacks them (best effort: a managed
    Temporal may forbid it, then an admin registers them once, docs/operator.md)."""
    keys = (SA_NAMESPACE, SA_NODESET, SA_SLURM_NODE, SA_PHASE, SA_CONTROLLER)
    names = {key.name: key.indexed_value_type for key in keys}
    try:
        listed = await temporal.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=temporal.namespace)
        )
        missing = {n: t for n, t in names.items() if n not in listed.custom_attributes}
        if missing:
            await temporal.operator_service.add_search_attributes(
                AddSearchAttributesRequest(
                    namespace=temporal.namespace,
                    search_attributes={n: IndexedValueType.ValueType(t) for n, t in missing.items()},
                )
            )
            logger.info("registered search attributes %s", ", ".join(sorted(missing)))
    except RPCError as err:
        logger.warning("could not check or register search attributes %s: %s", sorted(names), err)


async def run_operator(settings: Settings, stop: asyncio.Event) -> None:
    """Every component of the operator until `stop`."""
    ops = settings.operator
    temporal = await connect_temporal(settings)
    await ensure_search_attributes(temporal)
    # Watches have connections of their own (KubeClient); this pool is for the requests.
    kube = KubeClient.from_kubeconfig(settings.kube.kubeconfig, max_connections=16)
    slurm = SlurmClients(kube, ops.rest_url or settings.slurm.rest_url, service_addresses=ops.service_addresses)
    events = EventRecorder(kube)
    worker = Worker(
        temporal,
        task_queue=ops.task_queue,
        workflows=[NodeSetScaleInWorkflow, NodeSetScheduledUpdateWorkflow, ControllerReconfigureWorkflow],
        activities=[
            *NodeSetActivities(kube, slurm, events).all(),
            *ClusterActivities(kube, slurm, events, tools_root=ops.slurm_tools_root).all(),
        ],
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=3),
        workflow_runner=SandboxedWorkflowRunner() if settings.worker.sandbox else UnsandboxedWorkflowRunner(),
        graceful_shutdown_timeout=timedelta(seconds=5),
    )
    runtime, nodesets, tokens = build_runtime(kube, events, slurm, temporal, settings)
    if settings.telemetry.metrics_port:
        registry = CollectorRegistry(auto_describe=True)
        registry.register(OperatorCollector(runtime, nodesets, tokens))
        telemetry.start_metrics_server(settings.telemetry.metrics_port, settings.telemetry.metrics_address, registry)
    reconcilers = asyncio.create_task(runtime.run(), name="reconcilers")
    external = await serve_external_metrics(kube, nodesets, settings)
    try:
        async with events, worker:
            logger.info("operator running on task queue %s", ops.task_queue)
            await stop.wait()
    finally:
        if external is not None:
            external.close()
            await label_serving(kube, settings, serving=False)
        reconcilers.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await reconcilers
        await slurm.aclose()
        await kube.aclose()


async def serve_external_metrics(
    kube: KubeClient, nodesets: NodeSetReconciler, settings: Settings
) -> asyncio.Server | None:
    """The external metrics API for the HPA (docs/autoscaling.md), when a port is set; a cluster without the
    aggregation layer is said in the log and the operator runs on without it."""
    ops = settings.operator
    if not ops.external_metrics_port:
        return None
    if not (ops.external_metrics_cert_file and ops.external_metrics_key_file):
        logger.error("external metrics API not served: SLINKY_OPERATOR__EXTERNAL_METRICS_CERT_FILE and _KEY_FILE unset")
        return None
    try:
        proxy = await external_metrics.read_front_proxy(kube)
    except (KubeError, RuntimeError) as err:
        logger.error("external metrics API not served: %s", err)
        return None

    def families() -> list[Family]:
        return [f for poll in nodesets.polls.values() for f in poll.metrics]

    server = external_metrics.ExternalMetricsServer(kube, families, proxy)
    where = (ops.external_metrics_address, ops.external_metrics_port)
    try:
        listening = await server.serve(*where, ops.external_metrics_cert_file, ops.external_metrics_key_file)
    except (OSError, ssl.SSLError) as err:  # the port taken, a certificate that does not load
        logger.error("external metrics API not served on %s:%d: %s", *where, err)
        return None
    logger.info("external metrics API on %s:%d", *where)
    await label_serving(kube, settings, serving=True)
    return listening


async def label_serving(kube: KubeClient, settings: Settings, *, serving: bool) -> None:
    """Label this replica's pod while it serves the external metrics API (the chart's Service selects the label:
    only the leader serves); unlabel it otherwise. Without a pod name (not in a pod) there is nothing to do."""
    ops = settings.operator
    if not (ops.pod_name and ops.pod_namespace):
        return
    patch = {"metadata": {"labels": {wellknown.LABEL_EXTERNAL_METRICS: "serving" if serving else None}}}
    try:
        await kube.patch(f"/api/v1/namespaces/{ops.pod_namespace}/pods/{ops.pod_name}", patch)
    except KubeError as err:
        logger.warning("could not %s pod %s: %s", "label" if serving else "unlabel", ops.pod_name, err)


def build_runtime(
    kube: KubeClient, events: EventRecorder, slurm: SlurmClients, temporal: Client, settings: Settings
) -> tuple[Runtime, NodeSetReconciler, TokenReconciler]:
    """The controller runtime with every reconciler of the operator on it (one set of shared watches)."""
    ops = settings.operator
    runtime = Runtime(kube, events, namespaces=ops.namespaces, workers=ops.cluster_workers)
    nodesets = NodeSetReconciler(
        runtime,
        slurm,
        temporal,
        task_queue=ops.task_queue,
        node_poll_seconds=ops.node_poll_seconds,
        metrics_poll_seconds=ops.metrics_poll_seconds,
        fallback_seconds=ops.scale_in_fallback_seconds,
        registration_grace=ops.registration_grace_seconds,
    )
    tokens = TokenReconciler(runtime)
    runtime.add(nodesets, workers=ops.workers)
    runtime.add(tokens, workers=ops.token_workers)
    runtime.add(ControllerReconciler(runtime, ops, temporal))
    runtime.add(RestApiReconciler(runtime))
    runtime.add(AccountingReconciler(runtime, slurm))
    runtime.add(LoginSetReconciler(runtime))
    return runtime, nodesets, tokens


async def run(settings: Settings, *, stop: asyncio.Event | None = None) -> None:
    await run_as_leader(settings, settings.operator.lease_name, run_operator, stop or asyncio.Event())


async def _unlabel(settings: Settings) -> None:
    """Before the election: a replica that served and came back (a crash) is not serving now."""
    if settings.operator.external_metrics_port and settings.operator.pod_name:
        try:
            async with KubeClient.from_kubeconfig(settings.kube.kubeconfig) as kube:
                await label_serving(kube, settings, serving=False)
        except (OSError, ValueError, KeyError) as err:  # no kubeconfig yet: the election will say it louder
            logger.warning("could not unlabel this pod before the election: %s", err)


def main() -> None:
    asyncio.run(_unlabel(Settings()))
    leading.main(run_operator, lambda settings: settings.operator.lease_name)
