"""Settings for every slinky process, from pydantic-settings.

Precedence, highest first: init kwargs (tests) > environment (``SLINKY_<GROUP>__<FIELD>``) > the
secrets dir > defaults. A few well-known variables (``SLURM_REST_URL``, ``SLURM_JWT_FILE``,
``KUBECONFIG``) are read as aliases so that the development stack's env file works as is.
Workflows never read settings: whatever a workflow decides on is copied into its input.
"""

from __future__ import annotations

from typing import Literal

from pydantic import AliasChoices, BaseModel, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from slinky import wellknown


class SlurmSettings(BaseModel):
    """How to reach slurmrestd."""

    rest_url: str = Field("http://127.0.0.1:6820", description="Base URL of slurmrestd.")
    api_version: str = Field("v0.0.44", description="slurmrestd data parser version (v0.0.42-v0.0.45).")
    user_name: str = Field("slurm", description="Sent as X-SLURM-USER-NAME; the SlurmUser acts as admin.")
    jwt: SecretStr | None = Field(None, description="A static JWT; prefer jwt_file so tokens can rotate.")
    jwt_file: str | None = Field(None, description="File holding the JWT, re-read when it changes.")
    timeout_seconds: float = Field(10.0, description="Read timeout per request, seconds.")
    connect_timeout_seconds: float = Field(3.0, description="Connect timeout, seconds.")
    max_connections: int = Field(32, description="Connection cap; slurmrestd serves at most 124.")
    watch_interval_seconds: float = Field(0.25, description="Job watcher poll interval, seconds.")
    watch_fast_interval_seconds: float = Field(
        0.05, description="Poll interval while a job the bridge just submitted is pending (its pods wait), seconds."
    )
    watch_fast_window_seconds: float = Field(
        3.0, description="How long after its submit a pending job keeps the fast poll interval, seconds."
    )
    watch_quiet_jobs: int = Field(
        2000,
        ge=1,
        description="From this many jobs in Slurm, the job watcher probes every job's state only when slurmctld's job "
        "counters (GET diag) moved, or every 2 s (docs/slurm-client.md, 'A quiet cluster with many jobs').",
    )
    immediate_allocation: bool = Field(
        True,
        description=(
            "Ask Slurm for an immediate allocation (job/allocate) before queueing a job with job/submit; a "
            "refused attempt leaves a FAILED job record (docs/bridge.md, 'Immediate allocation')."
        ),
    )
    clear_phantom_allocations: bool = Field(
        True,
        description=(
            "Clear an external node Slurm holds as allocated with no job on it (DOWN, then RESUME) once the bridge "
            "confirmed it for 30 s; false: only count it busy and report it (docs/bridge.md, 'Phantom allocations')."
        ),
    )


class KubeSettings(BaseModel):
    """How to reach the Kubernetes API server."""

    kubeconfig: str | None = Field(None, description="Path to a kubeconfig; None means in-cluster.")


class BridgeSettings(BaseModel):
    """The bridge's scheduling scope (upstream slurm-bridge config.yaml keys)."""

    scheduler_name: str = Field(wellknown.SCHEDULER_NAME, description="spec.schedulerName the bridge owns.")
    managed_namespaces: list[str] = Field(
        default_factory=lambda: [wellknown.DEFAULT_MANAGED_NAMESPACE],
        description="Namespaces whose pods the bridge schedules.",
    )
    managed_namespace_selector: str | None = Field(
        None, description="Label selector for managed namespaces; overrides managed_namespaces."
    )
    partition: str = Field(wellknown.DEFAULT_PARTITION, description="Default Slurm partition.")
    mcs_label: str = Field(wellknown.DEFAULT_MCS_LABEL, description="Slurm MCS label on bridge jobs.")


class TemporalSettings(BaseModel):
    """Where the Temporal frontend is."""

    address: str = Field("127.0.0.1:7233", description="host:port of the Temporal frontend.")
    namespace: str = Field("default", description="Temporal namespace.")
    task_queue: str = Field("slinky-bridge", description="Task queue of the bridge workers.")


class WorkerSettings(BaseModel):
    """The Temporal worker process."""

    sandbox: bool = Field(
        False, description="Run workflows in the Temporal sandbox (slower; see workers/bridge/worker.py)."
    )
    eager_start: bool | None = Field(
        None,
        description="Start a pod's lifecycle on the leader's own worker (saves a task-queue round trip); "
        "default: only without leader election, since with it the replicas share the lifecycles.",
    )

    batch_pod_events: bool = Field(
        True,
        description="Send a lifecycle's pod events that come together (a gang created or deleted at once) as one "
        "pod_events signal; turn off while replicas of a version without that signal still run (docs/bridge.md, "
        '"Upgrading").',
    )

    sticky_schedule_to_start_seconds: float = Field(
        10.0,
        gt=0,
        description="How long a lifecycle's next workflow task waits for this worker (which has the lifecycle in its "
        "cache) before Temporal hands it to any worker with the full history. Short: a killed worker's lifecycles "
        "move on sooner; too short: in a burst (3,000 pods deleted at once) tasks leave a busy but live worker and "
        "each is replayed from its whole history.",
    )

    safety_rechecks_per_second: float = Field(
        5.0,
        gt=0,
        description="The budget of the lifecycles' safety re-checks, all together: with more open workloads than "
        "300 s times this, each re-checks less often (at 10,000 and 5 a second: every 2,000 s). A re-check is a "
        "workflow task replayed from its history (the worker caches 1,000) and two reads; only a lost signal waits "
        "for one.",
    )

    max_concurrent_workflow_tasks: int = Field(
        100,
        ge=2,
        description="Workflow tasks this worker holds at once. A pod's lifecycle starts on this worker only while "
        "one of them is free (eager start); otherwise its first task goes through the task queue, behind every "
        "task waiting there.",
    )

    submit_relay_port: int | None = Field(
        None,
        description="With leader election: the leader takes its followers' submits on this port, so that their "
        'pods too get immediate allocations (docs/bridge.md, "Several replicas"); unset: followers queue their jobs.',
    )
    submit_relay_host: str = Field(
        "127.0.0.1",
        description="Where this replica listens for the submit relay while it leads, and where followers reach it "
        "(the chart sets the pod's IP).",
    )

    def eager_start_or_default(self, leader_election: bool) -> bool:
        return (not leader_election) if self.eager_start is None else self.eager_start


class LeaderElectionSettings(BaseModel):
    """Several bridge replicas: one leader at a time, on a coordination.k8s.io Lease (docs/bridge.md)."""

    enabled: bool = Field(False, description="Wait for the Lease before running; off: run at once (one replica).")
    namespace: str = Field("default", description="Namespace of the Lease (the bridge's own, in the chart).")
    name: str = Field("slinky-bridge", description="Name of the Lease, one per bridge installation.")
    identity: str | None = Field(None, description="This replica's name; default: hostname and a random suffix.")
    lease_seconds: float = Field(15.0, description="How long a silent leader keeps the Lease for the others.")
    renew_deadline_seconds: float = Field(10.0, description="How long the leader tries to renew before it stops.")
    retry_seconds: float = Field(2.0, description="Wait between tries, for standbys and for renewals.")


class TelemetrySettings(BaseModel):
    """Logging and metrics."""

    log_json: bool = Field(False, description="Log one JSON object per line.")
    log_level: str = Field("INFO", description="Root log level.")
    metrics_port: int | None = Field(None, description="Prometheus port; None disables.")
    health_port: int | None = Field(
        None,
        description="Health endpoint (/healthz, /readyz) for the kubelet's probes, on metrics_address; None disables.",
    )
    metrics_address: str = Field(
        "127.0.0.1", description="Address the metrics listen on: loopback by default, 0.0.0.0 in a pod to be scraped."
    )


class ExporterSettings(BaseModel):
    """The Slurm exporter (`python -m workers.exporter`; docs/metrics.md): Slurm's state from any slurmrestd
    (``SLURM_REST_URL``, ``SLURM_JWT_FILE``) as Prometheus metrics."""

    port: int = Field(8080, description="Port of /metrics (upstream's exporter: 8080).")
    address: str = Field("127.0.0.1", description="Address /metrics listens on: 0.0.0.0 in a pod to be scraped.")
    poll_seconds: float = Field(5.0, description="slurmrestd is read this often (upstream's --cache-freq, 5 s).")


class OperatorSettings(BaseModel):
    """The operator process (`python -m workers.operator`; docs/operator.md)."""

    task_queue: str = Field("slinky-operator", description="Task queue of the operator's workflows.")
    lease_name: str = Field("slinky-operator", description="Lease of the operator's leader election.")
    rest_url: str | None = Field(
        None, description="slurmrestd of external Controllers; default: slurm.rest_url (SLURM_REST_URL)."
    )
    node_poll_seconds: float = Field(1.0, description="The one shared Slurm node poll, per Controller, seconds.")
    external_metrics_port: int = Field(
        0, description="Port of the external metrics API (external.metrics.k8s.io, for the HPA); 0: not served."
    )
    external_metrics_address: str = Field("127.0.0.1", description="Address the external metrics API listens on.")
    external_metrics_cert_file: str | None = Field(
        None, description="Serving certificate of the external metrics API (the APIService's caBundle signs it)."
    )
    external_metrics_key_file: str | None = Field(None, description="Its private key.")
    pod_name: str | None = Field(
        None, description="This replica's pod (downward API): labelled while it serves the external metrics API."
    )
    pod_namespace: str | None = Field(None, description="That pod's namespace.")
    metrics_poll_seconds: float = Field(
        5.0,
        description="Slurm metrics (jobs, partitions, diag besides the nodes) are read in the node poll this often,"
        " per Controller, seconds; 0: no Slurm metrics (docs/metrics.md).",
    )
    scale_in_fallback_seconds: float = Field(
        60.0, description="A scale-in re-reads its node this often when no poll signal came."
    )
    registration_grace_seconds: float = Field(
        30.0,
        gt=0,
        description="How long a running slurmd may stay out of Slurm before its NodeSet's SlurmdRegistered is False.",
    )
    workers: int = Field(4, description="NodeSet reconciles that run at once (one per NodeSet at a time).")
    token_workers: int = Field(2, description="Token reconciles that run at once (one per Token at a time).")
    namespaces: list[str] = Field(default_factory=list, description="Watch only these namespaces; empty: all.")
    cluster_workers: int = Field(2, description="Managed-cluster reconciles (Controller, RestApi, ...) at once.")
    cgroup_conf: str | None = Field(
        None,
        description="cgroup.conf of a managed Controller whose configFileRefs hold none; default: upstream's "
        "(CgroupPlugin=cgroup/v2, IgnoreSystemd=yes). The dev stack's pods have no cgroup filesystem.",
    )
    slurm_conf_defaults: str = Field(
        "",
        description="Key=Value items (blank-separated), each written as a slurm.conf line before a managed "
        "Controller's extraConf (a key its extraConf sets is left out), e.g. ProctrackType for nodes without cgroups.",
    )
    slurm_tools_root: str = Field(
        "",
        description="A Slurm rootfs whose scontrol checks a managed Controller's new config before it is applied "
        "(chroot); empty: the scontrol on PATH, and none there: the check is skipped (said so in the workflow).",
    )
    reconfigure_verify_seconds: float = Field(
        180.0, description="How long slurmctld has to run a new config before it is rolled back."
    )
    config_propagation_seconds: float = Field(
        2.0,
        description="In-place reconfigure: how long the slurmctld pod's projected ConfigMap takes to show new files "
        "(a kubelet's sync period; the dev stack's node agent writes them within a second).",
    )
    service_addresses: Literal["dns", "endpoints"] = Field(
        "dns",
        description="How the operator reaches a managed cluster's slurmrestd: the Service's DNS name (in the "
        "cluster), or a ready pod address from its Endpoints (an operator outside cluster DNS: the dev stack).",
    )


class Settings(BaseSettings):
    """All settings of a slinky process."""

    model_config = SettingsConfigDict(env_prefix="SLINKY_", env_nested_delimiter="__", extra="ignore")

    slurm: SlurmSettings = Field(default_factory=SlurmSettings)
    kube: KubeSettings = Field(default_factory=KubeSettings)
    bridge: BridgeSettings = Field(default_factory=BridgeSettings)
    temporal: TemporalSettings = Field(default_factory=TemporalSettings)
    leader_election: LeaderElectionSettings = Field(default_factory=LeaderElectionSettings)
    worker: WorkerSettings = Field(default_factory=WorkerSettings)
    telemetry: TelemetrySettings = Field(default_factory=TelemetrySettings)
    operator: OperatorSettings = Field(default_factory=OperatorSettings)
    exporter: ExporterSettings = Field(default_factory=ExporterSettings)

    # Well-known environment variables of the dev stack and of the charts.
    slurm_rest_url: str | None = Field(None, validation_alias=AliasChoices("SLURM_REST_URL"))
    slurm_jwt_file: str | None = Field(None, validation_alias=AliasChoices("SLURM_JWT_FILE"))
    kubeconfig: str | None = Field(None, validation_alias=AliasChoices("KUBECONFIG"))
    temporal_address: str | None = Field(None, validation_alias=AliasChoices("TEMPORAL_ADDRESS"))
    temporal_namespace: str | None = Field(None, validation_alias=AliasChoices("TEMPORAL_NAMESPACE"))

    def model_post_init(self, _context: object) -> None:
        """Fold the well-known variables into their groups unless the group was set explicitly."""
        if self.slurm_rest_url and "rest_url" not in self.slurm.model_fields_set:
            self.slurm.rest_url = self.slurm_rest_url
        if self.slurm_jwt_file and "jwt_file" not in self.slurm.model_fields_set:
            self.slurm.jwt_file = self.slurm_jwt_file
        if self.kubeconfig and "kubeconfig" not in self.kube.model_fields_set:
            self.kube.kubeconfig = self.kubeconfig
        if self.temporal_address and "address" not in self.temporal.model_fields_set:
            self.temporal.address = self.temporal_address
        if self.temporal_namespace and "namespace" not in self.temporal.model_fields_set:
            self.temporal.namespace = self.temporal_namespace
