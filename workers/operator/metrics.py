"""The operator's Prometheus metrics (`slinky_operator_*`), read from its controllers' own state at each scrape.

Nothing is counted twice: the reconcilers, the shared Slurm polls and the NodeSet status are the source, this
collector only reads them. Served with the Temporal SDK's (on the next port) when
`SLINKY_TELEMETRY__METRICS_PORT` is set.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from slinky.operator import slurm_metrics, updates
from workers.operator.nodeset.pods import is_terminating
from workers.operator.nodeset.poll import owner_of
from workers.operator.nodeset.reconciler import NodeSetReconciler
from workers.operator.runtime import Runtime
from workers.operator.token import TokenReconciler


class OperatorCollector:
    """Counters and gauges of one operator process."""

    def __init__(self, runtime: Runtime, nodesets: NodeSetReconciler, tokens: TokenReconciler) -> None:
        self.runtime = runtime
        self.nodesets = nodesets
        self.tokens = tokens

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        reconciles = CounterMetricFamily(
            "slinky_operator_reconciles",
            "Reconciles done. kind: NodeSet, Token, Controller, RestApi, Accounting, LoginSet; result: ok, error "
            "(an error is retried on its own backoff).",
            labels=["kind", "result"],
        )
        for kind, queue in sorted(self.runtime.queues.items()):
            reconciles.add_metric([kind, "ok"], queue.runs - queue.failed)
            reconciles.add_metric([kind, "error"], queue.failed)
        yield reconciles

        polls = CounterMetricFamily(
            "slinky_operator_slurm_polls",
            "Shared Slurm polls (one GET nodes each, for every NodeSet and scale-in of a Controller). "
            "result: ok, job_list (the poll also listed jobs: a node was busy).",
            labels=["controller", "result"],
        )
        up = GaugeMetricFamily(
            "slinky_operator_slurm_up",
            "1 when the Controller's slurmrestd answered the last poll, else 0.",
            labels=["controller"],
        )
        for (namespace, name), poll in self.nodesets.polls.items():
            controller = f"{namespace}/{name}"
            polls.add_metric([controller, "ok"], poll.polls)
            polls.add_metric([controller, "job_list"], poll.job_lists)
            up.add_metric([controller], 0 if poll.error or not poll.synced else 1)
        yield polls
        yield up

        draining = GaugeMetricFamily(
            "slinky_operator_pods_held_by_scale_in",
            "NodeSet pods a scale-in workflow holds now (drained, then deleted): scale-ins and rolling updates.",
            labels=["nodeset"],
        )
        held: dict[str, int] = {}
        for pod in self.nodesets.pods.values():
            owner = owner_of(pod)
            if owner is not None and updates.in_flight(pod) and not is_terminating(pod):
                key = f"{owner[0]}/{owner[1]}"
                held[key] = held.get(key, 0) + 1
        for nodeset in self.nodesets.nodesets:
            key = f"{nodeset[0]}/{nodeset[1]}"
            draining.add_metric([key], held.get(key, 0))
        yield draining

        slurm_nodes = GaugeMetricFamily(
            "slinky_operator_nodeset_slurm_nodes",
            "A NodeSet's Slurm nodes by state, as its status counts them. state: idle, allocated, down, drain.",
            labels=["nodeset", "state"],
        )
        replicas = GaugeMetricFamily(
            "slinky_operator_nodeset_replicas",
            "A NodeSet's pods. kind: desired, current, ready, updated.",
            labels=["nodeset", "kind"],
        )
        for (namespace, name), raw in self.nodesets.nodesets.items():
            status = raw.get("status") or {}
            key = f"{namespace}/{name}"
            for state in ("Idle", "Allocated", "Down", "Drain"):
                slurm_nodes.add_metric([key, state.lower()], float(status.get(f"slurm{state}", 0)))
            for kind, field in (("desired", "desired"), ("current", "replicas"), ("ready", "readyReplicas")):
                replicas.add_metric([key, kind], float(status.get(field, 0)))
            replicas.add_metric([key, "updated"], float(status.get("updatedReplicas", 0)))
        yield slurm_nodes
        yield replicas

        mints = CounterMetricFamily("slinky_operator_token_mints", "JWTs minted into Token Secrets.")
        mints.add_metric([], self.tokens.mints)
        yield mints
        yield from self.slurm()

    def slurm(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        """Slurm's state (docs/metrics.md), from each Controller's last metrics round; never a call to Slurm."""
        polls = sorted(self.nodesets.polls.items())
        yield from slurm_metrics.to_prometheus(f for _, poll in polls for f in poll.metrics)
        labels = ["namespace", "controller"]
        age = GaugeMetricFamily(
            "slinky_slurm_poll_age_seconds",
            "Seconds since the Controller's slurmrestd last answered a poll.",
            labels=labels,
        )
        errors = CounterMetricFamily(
            "slinky_slurm_poll_errors", "Polls of the Controller's slurmrestd that failed.", labels=labels
        )
        now = time.time()
        for (namespace, name), poll in polls:
            if poll.polled_at:
                age.add_metric([namespace, name], max(now - poll.polled_at, 0.0))
            errors.add_metric([namespace, name], poll.errors)
        yield age
        yield errors
