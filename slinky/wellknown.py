"""Every well-known key of Slinky's wire contract, in one place.

Users' manifests and Slurm tooling depend on these exact strings (upstream slurm-bridge
``internal/wellknown``), so they are never spelled anywhere else in the code base.
"""

from __future__ import annotations

from typing import Final

# Prefixes
PREFIX_SLINKY: Final = "slinky.slurm.net/"
PREFIX_SCHEDULER: Final = "scheduler.slinky.slurm.net/"
PREFIX_SLURMJOB: Final = "slurmjob.slinky.slurm.net/"
PREFIX_TOPOLOGY: Final = "topology.slinky.slurm.net/"
PREFIX_SIM: Final = "sim.slinky.slurm.net/"
"""Keys read only by the development node agent, never by the product."""

SCHEDULER_NAME: Final = "slurm-bridge-scheduler"
DEFAULT_PARTITION: Final = "slurm-bridge"
DEFAULT_MANAGED_NAMESPACE: Final = "slurm-bridge"
DEFAULT_MCS_LABEL: Final = "kubernetes"

# Keys the bridge writes on pods (users may not set them; the webhook enforces this).
LABEL_SLURM_JOB_ID: Final = PREFIX_SCHEDULER + "slurm-jobid"
"""Slurm job id; the same on every pod of a group."""
ANNOTATION_SLURM_NODE: Final = PREFIX_SLINKY + "slurm-node"
"""Kubernetes node picked from the Slurm allocation."""
FINALIZER_SCHEDULER: Final = PREFIX_SCHEDULER + "finalizer"
"""Keeps the job id readable until the Slurm job is cancelled."""
ANNOTATION_WORKFLOW_ID: Final = PREFIX_SCHEDULER + "workflow-id"
"""The Temporal workflow that owns the pod's lifecycle (ours; not in upstream): `temporal workflow show -w`."""

ANNOTATION_SUBMIT_RELAY: Final = PREFIX_SCHEDULER + "submit-relay"
"""On the bridge's leader Lease (ours): ``host:port`` where the leader takes its followers' submits."""
ANNOTATION_LEASE_WRITER: Final = PREFIX_SLINKY + "lease-annotations-by"
"""On a leader Lease (ours): the holder that wrote its other annotations; a later holder's standbys ignore them."""

LABEL_WEBHOOK: Final = PREFIX_SLINKY + "webhook"
LABEL_EXTERNAL_METRICS: Final = PREFIX_SLINKY + "external-metrics"
"""On the operator pod that serves the external metrics API now (the leader): the chart's Service selects it."""
"""On a namespace or a pod: ``ignore`` keeps the admission webhooks away (system namespaces, the bridge's own)."""
WEBHOOK_IGNORE: Final = "ignore"

# Node keys.
LABEL_SLURM_NODENAME: Final = PREFIX_SLINKY + "slurm-nodename"
"""Slurm NodeName when it differs from the Kubernetes node name."""
LABEL_EXTERNAL_NODE: Final = PREFIX_SCHEDULER + "external-node"
"""Presence means: register this Kubernetes node in Slurm as State=External."""
ANNOTATION_EXTERNAL_NODE_PARTITIONS: Final = PREFIX_SCHEDULER + "external-node-partitions"
"""CSV of partitions; they become node Features."""
ANNOTATION_TOPOLOGY_SPEC: Final = PREFIX_TOPOLOGY + "spec"
"""Slurm dynamic topology string, e.g. ``topo-switch:s1,topo-block:b1``."""
TAINT_MANAGED_NODE: Final = PREFIX_SLINKY + "managed-node"
"""NoExecute taint ``slinky.slurm.net/managed-node=<schedulerName>`` on every bridged node."""

# Workload annotations, all under slurmjob.slinky.slurm.net/.
ANNOTATION_ACCOUNT: Final = PREFIX_SLURMJOB + "account"
ANNOTATION_CONSTRAINTS: Final = PREFIX_SLURMJOB + "constraints"
ANNOTATION_CPU_PER_TASK: Final = PREFIX_SLURMJOB + "cpu-per-task"
ANNOTATION_EXCLUSIVE: Final = PREFIX_SLURMJOB + "exclusive"
ANNOTATION_GRES: Final = PREFIX_SLURMJOB + "gres"
ANNOTATION_GROUP_ID: Final = PREFIX_SLURMJOB + "group-id"
ANNOTATION_JOB_NAME: Final = PREFIX_SLURMJOB + "job-name"
ANNOTATION_LICENSES: Final = PREFIX_SLURMJOB + "licenses"
ANNOTATION_MAX_NODES: Final = PREFIX_SLURMJOB + "max-nodes"
ANNOTATION_MEM_PER_NODE: Final = PREFIX_SLURMJOB + "mem-per-node"
ANNOTATION_MIN_NODES: Final = PREFIX_SLURMJOB + "min-nodes"
ANNOTATION_PARTITION: Final = PREFIX_SLURMJOB + "partition"
ANNOTATION_PRIORITY: Final = PREFIX_SLURMJOB + "priority"
ANNOTATION_QOS: Final = PREFIX_SLURMJOB + "qos"
ANNOTATION_RESERVATION: Final = PREFIX_SLURMJOB + "reservation"
ANNOTATION_TIMELIMIT: Final = PREFIX_SLURMJOB + "timelimit"
ANNOTATION_USER_ID: Final = PREFIX_SLURMJOB + "user-id"
ANNOTATION_WCKEY: Final = PREFIX_SLURMJOB + "wckey"

WORKLOAD_ANNOTATIONS: Final = frozenset(
    {
        ANNOTATION_ACCOUNT,
        ANNOTATION_CONSTRAINTS,
        ANNOTATION_CPU_PER_TASK,
        ANNOTATION_EXCLUSIVE,
        ANNOTATION_GRES,
        ANNOTATION_GROUP_ID,
        ANNOTATION_JOB_NAME,
        ANNOTATION_LICENSES,
        ANNOTATION_MAX_NODES,
        ANNOTATION_MEM_PER_NODE,
        ANNOTATION_MIN_NODES,
        ANNOTATION_PARTITION,
        ANNOTATION_PRIORITY,
        ANNOTATION_QOS,
        ANNOTATION_RESERVATION,
        ANNOTATION_TIMELIMIT,
        ANNOTATION_USER_ID,
        ANNOTATION_WCKEY,
    }
)

DEPRECATED_ANNOTATION_ALIASES: Final = {
    PREFIX_SLINKY + "job-name": ANNOTATION_JOB_NAME,
    PREFIX_SLINKY + "account": ANNOTATION_ACCOUNT,
}
"""Un-prefixed keys from the 2025 slides, still accepted with a warning Event."""

# Development node agent (simulated kubelet) keys.
ANNOTATION_SIM_RUN_SECONDS: Final = PREFIX_SIM + "run-seconds"
"""Seconds a bound pod runs before the node agent marks it Succeeded (absent: until deleted)."""
ANNOTATION_SIM_EXIT_CODE: Final = PREFIX_SIM + "exit-code"
"""Exit code the node agent reports; non-zero makes the pod Failed."""
LABEL_SIM_AGENT: Final = PREFIX_SIM + "agent"
"""Marks Node objects owned by the development node agent."""

# Slurm vocabulary the bridge decides on (shared by the client, the router and the workflow).
TERMINAL_JOB_STATES: Final = frozenset(
    {"BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "TIMEOUT"}
)
"""Job states after which a job holds no allocation."""
QUIET_PENDING_REASONS: Final = frozenset({"", "None"})
"""Pending reasons that say nothing yet: the job was just submitted and not evaluated."""

WAITING_REASONS: Final = frozenset({"", "None", "Priority", "Resources"})
"""Pending reasons of a job that waits only for nodes (not held, not a dependency or a begin time): while one
exists, an immediate allocation would be refused for priority, so the bridge queues its job instead."""

# Temporal search attributes registered by `slinky dev up` and documented for production.
SEARCH_ATTRIBUTES: Final = {
    "SlinkyNamespace": "Keyword",
    "SlinkyWorkloadKind": "Keyword",
    "SlinkyWorkloadName": "Keyword",
    "SlinkySlurmJobId": "Int",
    "SlinkyPhase": "Keyword",
    "SlinkyPartition": "Keyword",
    "SlinkyGroupSize": "Int",
    "SlinkyNodeSet": "Keyword",
    "SlinkySlurmNode": "Keyword",
}

# Third-party keys the bridge reads (set by other projects' controllers; spelled only here).
LABEL_POD_GROUP: Final = "scheduling.x-k8s.io/pod-group"
"""scheduler-plugins coscheduling: the PodGroup a pod belongs to."""
LABEL_LWS_NAME: Final = "leaderworkerset.sigs.k8s.io/name"
LABEL_LWS_GROUP_INDEX: Final = "leaderworkerset.sigs.k8s.io/group-index"
LABEL_LWS_GROUP_KEY: Final = "leaderworkerset.sigs.k8s.io/group-key"
"""A hash shared by all pods of one LeaderWorkerSet group (leader + workers)."""
LABEL_LWS_WORKER_INDEX: Final = "leaderworkerset.sigs.k8s.io/worker-index"
ANNOTATION_LWS_SIZE: Final = "leaderworkerset.sigs.k8s.io/size"
LABEL_JOB_NAME: Final = "job-name"
"""Set by the Job controller on its pods."""
LABEL_JOBSET_NAME: Final = "jobset.sigs.k8s.io/jobset-name"

API_PODGROUP: Final = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{namespace}/podgroups/{name}"
API_LWS: Final = "/apis/leaderworkerset.x-k8s.io/v1/namespaces/{namespace}/leaderworkersets/{name}"
API_JOB: Final = "/apis/batch/v1/namespaces/{namespace}/jobs/{name}"
API_JOBSET: Final = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets/{name}"

# slurm-operator keys (upstream slurm-operator `api/v1beta1/well_known.go`, `internal/builder/labels`).
PREFIX_NODESET: Final = "nodeset." + PREFIX_SLINKY
PREFIX_CONTROLLER: Final = "controller." + PREFIX_SLINKY
ANNOTATION_POD_CORDON: Final = PREFIX_NODESET + "pod-cordon"
"""On a NodeSet pod: ``true`` means drain its Slurm node (set by a scale-in, an update or a cordoned node)."""
ANNOTATION_POD_DELETION_COST: Final = PREFIX_NODESET + "pod-deletion-cost"
"""int32 on a NodeSet pod; lower is deleted first on scale-in."""
ANNOTATION_POD_DEADLINE: Final = PREFIX_NODESET + "pod-deadline"
"""RFC 3339 on a NodeSet pod: when its running Slurm jobs end at the latest (max start + time limit)."""
ANNOTATION_NODE_CORDON_REASON: Final = PREFIX_NODESET + "node-cordon-reason"
ANNOTATION_NODE_HOSTNAME_OVERRIDE: Final = PREFIX_NODESET + "hostname-override"
LABEL_NODESET_POD_NAME: Final = PREFIX_NODESET + "pod-name"
LABEL_NODESET_POD_INDEX: Final = PREFIX_NODESET + "pod-index"
LABEL_NODESET_POD_HOSTNAME: Final = PREFIX_NODESET + "pod-hostname"
"""The Slurm node name of a NodeSet pod."""
LABEL_NODESET_POD_PROTECT: Final = PREFIX_NODESET + "pod-protect"
"""Selector of the shared worker PodDisruptionBudget: set while the pod's Slurm node runs jobs."""
LABEL_NODESET_SCALING_MODE: Final = PREFIX_NODESET + "scaling-mode"
LABEL_CONTROLLER_ACTIVE: Final = PREFIX_CONTROLLER + "active"
LABEL_CLUSTER: Final = PREFIX_SLINKY + "cluster"
FINALIZER_NODESET_RESERVATION: Final = PREFIX_NODESET + "reservation"
TAINT_NODESET_WORKER: Final = PREFIX_NODESET + "worker"
"""NoExecute taint of nodes reserved for NodeSet pods; the pods tolerate it."""
LABEL_APP: Final = "app.kubernetes.io/name"
LABEL_INSTANCE: Final = "app.kubernetes.io/instance"
LABEL_COMPONENT: Final = "app.kubernetes.io/component"
LABEL_CONTROLLER_REVISION_HASH: Final = "controller-revision-hash"
APP_SLURMD: Final = "slurmd"
COMPONENT_WORKER: Final = "worker"
ANNOTATION_DEFAULT_CONTAINER: Final = "kubectl.kubernetes.io/default-container"
OPERATOR_REASON_PREFIX: Final = "slurm-operator: "
"""Slurm node reasons the operator owns start with this; any other reason is an admin's and never touched."""
ANNOTATION_CONTROLLER_REST_URL: Final = PREFIX_SLINKY + "slurmrestd-url"
"""On an external Controller (ours; not in upstream): the slurmrestd URL of that cluster, over the operator's
default (`SLINKY_OPERATOR__REST_URL`), so each external cluster is reached at its own slurmrestd."""
ANNOTATION_SCALE_IN_WORKFLOW: Final = PREFIX_NODESET + "scale-in-workflow"
"""The Temporal workflow draining a condemned NodeSet pod (ours; not in upstream): `temporal workflow show -w`."""
ANNOTATION_SCHEDULED_UPDATE_WORKFLOW: Final = PREFIX_NODESET + "scheduled-update-workflow"
"""On a NodeSet: the ID of the ScheduledUpdate window workflow that keeps its reservation (ours, not upstream's)."""
ANNOTATION_JWT_KEY_HASH: Final = PREFIX_SLINKY + "jwt-key-hash"
"""On a Token's Secret: a fingerprint of the key its JWT is signed with, so a rotated key is seen at once."""
APP_TOKEN: Final = "token"
"""``app.kubernetes.io/name`` of a Token's Secret (``app.kubernetes.io/instance`` is the Token's name)."""
