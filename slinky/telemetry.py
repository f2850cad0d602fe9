"""Logging (plain or JSON lines) and the bridge's Prometheus metrics, configured once per process."""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable, Iterator, Mapping

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily

from slinky.config import TelemetrySettings


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, plus any ``extra=`` fields."""

    _RESERVED = frozenset(vars(logging.makeLogRecord({})).keys()) | {"message", "asctime"}

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, object] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        out.update({k: v for k, v in vars(record).items() if k not in self._RESERVED})
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def configure_logging(settings: TelemetrySettings) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if settings.log_json:
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(settings.log_level.upper())
    logging.getLogger("httpx").setLevel(logging.WARNING)


# --------------------------------------------------------------------------------------------- metrics
# The bridge's own metrics (the Temporal SDK's come from its Runtime, on the same port family). Help texts
# list label values; names carry the unit; counters end in _total.
REGISTRY = CollectorRegistry(auto_describe=True)
WORKFLOWS_STARTED = Counter(
    "slinky_bridge_workflows_started_total",
    "Workload lifecycles started by the pod watcher (repeated starts of a running lifecycle included).",
    registry=REGISTRY,
)
SIGNALS_SENT = Counter(
    "slinky_bridge_signals_total",
    "Signals sent to workload lifecycles. kind: pod_event (from the pod watcher), job_event (from the Slurm poll).",
    ["kind"],
    registry=REGISTRY,
)
PODS_BOUND = Counter(
    "slinky_bridge_pods_bound_total", "Pods bound to the node of their Slurm allocation.", registry=REGISTRY
)
CREATE_TO_BOUND = Histogram(
    "slinky_bridge_pod_create_to_bound_seconds",
    "From pod creation (creationTimestamp, 1 s resolution) to its binding by the bridge.",
    buckets=(0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 1800),
    registry=REGISTRY,
)
JOB_SUBMITS = Counter(
    "slinky_bridge_job_submits_total",
    "Placeholder job submits by outcome. outcome: allocated (RUNNING at once: job/allocate), queued (job/submit,"
    " after a refused or skipped immediate allocation), reused (the workflow's live job, after an unknown"
    " outcome), rejected (Slurm refused the job), readopted (a new placeholder on the nodes of a running workload"
    " whose job Slurm lost), readopt_refused (those nodes were no longer free).",
    ["outcome"],
    registry=REGISTRY,
)
JOB_START_SEEN = Histogram(
    "slinky_bridge_job_submit_to_running_seen_seconds",
    "From the bridge's submit of a placeholder job to the bridge knowing it RUNNING: the allocate call for an"
    " immediate allocation, else until the job watcher sees it (Slurm's scheduling latency plus the poll).",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 1800),
    registry=REGISTRY,
)
SIGNAL_SECONDS = Histogram(
    "slinky_bridge_signal_seconds",
    "Time to deliver one signal to a workload lifecycle (Temporal RPC, retries included). kind: pod_event, job_event.",
    ["kind"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5),
    registry=REGISTRY,
)
EVENTS_DROPPED = Counter(
    "slinky_bridge_events_dropped_total",
    "Kubernetes Events not recorded because the background event queue was full.",
    registry=REGISTRY,
)
PHANTOM_ALLOCATIONS = Counter(
    "slinky_bridge_phantom_allocations_total",
    "External nodes Slurm held as allocated with no job on them (docs/bridge.md, 'Phantom allocations'). outcome:"
    " found (confirmed, counted busy), cleared (DOWN then RESUME by the bridge).",
    ["outcome"],
    registry=REGISTRY,
)
FOREIGN_JOB_SPARED = Counter(
    "slinky_bridge_foreign_jobs_spared_total",
    "Cancels not sent because the job id, reused after a slurmctld crash, now names another workload's job.",
    registry=REGISTRY,
)
SUBMIT_RELAY = Counter(
    "slinky_bridge_submit_relay_total",
    "A follower replica's submits through the leader's submit relay, by result: relayed (the leader answered),"
    " local (no leader reached, or it refused before doing anything: submitted here), unanswered (sent, no answer:"
    " the attempt is retried), failed (the leader's submit failed: retried).",
    ["result"],
    registry=REGISTRY,
)
CANCEL_OWNER_CHECKS = Counter(
    "slinky_bridge_cancel_owner_checks_total",
    "Where a cancel learned whose the job is. source: view (the job watcher's, confirmed by a poll and a"
    " controller check made after the cancel began), read (GET job/{id}: polls slow or not covering the job).",
    ["source"],
    registry=REGISTRY,
)
TEMPORAL_CALL_RETRIES = Counter(
    "slinky_bridge_temporal_call_retries_total",
    "The bridge's own Temporal calls that failed after the SDK's retries and are tried again after a backoff."
    " call: start (a lifecycle), signal. status: RESOURCE_EXHAUSTED (Temporal's rate limit), UNAVAILABLE, ...",
    ["call", "status"],
    registry=REGISTRY,
)
GC_ACTIONS = Counter(
    "slinky_bridge_gc_actions_total",
    "Garbage-collection actions. action: cancel_job (orphan Slurm job), delete_pod (pod whose job is gone),"
    " recheck (a lifecycle whose job Slurm no longer lists was asked to re-check).",
    ["action"],
    registry=REGISTRY,
)

GC_PASS_SECONDS = Histogram(
    "slinky_bridge_gc_pass_seconds",
    "Wall time of one garbage-collection pass (a visibility listing of the running lifecycles, the job view or"
    " list, a list of the labelled pods, and what it does): its cost grows with the open workloads.",
    buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
    registry=REGISTRY,
)


class PollCollector:
    """``slinky_bridge_slurm_job_polls_total{result}``, read from the job watcher's own counters."""

    def __init__(
        self, counts: Callable[[], tuple[int, int, int]], requests: Callable[[], Mapping[str, int]] | None = None
    ) -> None:
        self.counts = counts
        self.requests = requests

    def collect(self) -> Iterator[CounterMetricFamily]:
        polls, errors, restarts = self.counts()
        family = CounterMetricFamily(
            "slinky_bridge_slurm_job_polls",
            "Incremental job polls of slurmrestd (one per interval for all workloads). result: ok, error.",
            labels=["result"],
        )
        family.add_metric(["ok"], polls - errors)
        family.add_metric(["error"], errors)
        yield family
        yield CounterMetricFamily(
            "slinky_bridge_slurm_controller_restarts",
            "slurmctld restarts seen by the job watcher (its start time changed); each one reconciles every open"
            " workload against one fresh job list.",
            value=restarts,
        )
        if self.requests is not None:
            kinds = CounterMetricFamily(
                "slinky_bridge_slurm_job_requests",
                "The job watcher's requests to slurmrestd. kind: full_list (GET jobs), probe_all (GET jobs/state),"
                " probe_tracked (GET jobs/state of the bridge's jobs by id, while other jobs outnumber them),"
                " job_read (GET job/{id}); probe_skipped: a probe of every job left out (slurmctld's job counters had"
                " not moved, from 2,000 jobs).",
                labels=["kind"],
            )
            for kind, count in self.requests().items():
                kinds.add_metric([kind], count)
            yield kinds


def start_metrics_server(port: int, address: str = "127.0.0.1", registry: CollectorRegistry | None = None) -> None:
    """Serve ``registry`` (default: the bridge's metrics) on ``http://<address>:<port>/metrics``."""
    start_http_server(port, addr=address, registry=registry or REGISTRY)
