"""slinky.bridge.nodesync: the node sync decisions, table-driven; plus the reconciler against FakeSlurmClient."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from slinky import wellknown
from slinky.bridge import nodesync
from slinky.bridge.nodesync import (
    AddTaint,
    Blocked,
    CreateSlurmNode,
    DeleteSlurmNode,
    Drain,
    RemoveTaint,
    SetComment,
    Undrain,
    WaitDrained,
)
from slinky.clients.slurm import FakeSlurmClient
from slinky.clients.slurm import Node as SlurmNode
from tests.builders import make_node

SCHED = wellknown.SCHEDULER_NAME
TAINT = AddTaint(wellknown.TAINT_MANAGED_NODE, SCHED)
EXT = {wellknown.LABEL_EXTERNAL_NODE: "true"}
PARTS = {wellknown.ANNOTATION_EXTERNAL_NODE_PARTITIONS: "slurm-bridge"}
CORDON = nodesync.cordon_reason("n1")
REG_4 = "slurm-bridge: external node of Kubernetes node n1 (CPUs=4 RealMemory=8192 Gres=)"
CONF_4 = (
    "NodeName=n1 NodeAddr=10.0.0.1 Sockets=1 CoresPerSocket=4 ThreadsPerCore=1 CPUs=4 RealMemory=8192 "
    'State=External Feature=slurm-bridge Gres=""'
)


def kube(
    name: str = "n1",
    *,
    tainted: bool = True,
    external: bool = False,
    cordoned: bool = False,
    cpu: str = "4",
    memory: str = "8Gi",
    address: str | None = "10.0.0.1",
    annotations: Mapping[str, str] | None = None,
    extra: Mapping[str, str] | None = None,
    slurm_name: str | None = None,
) -> dict[str, Any]:
    node = make_node(
        name,
        labels=EXT if external else None,
        annotations=annotations if annotations is not None else (PARTS if external else None),
        unschedulable=cordoned,
        cpu=cpu,
        memory=memory,
        allocatable=extra,
        managed_by=SCHED if tainted else None,
        slurm_name=slurm_name,
    )
    if address:
        node["status"]["addresses"] = [
            {"type": "InternalIP", "address": address},
            {"type": "Hostname", "address": name},
        ]
    return node


def slurm(
    name: str = "n1",
    *states: str,
    reason: str = "",
    comment: str = "",
    cpus: int = 4,
    mem: int = 8192,
    gres: str = "",
    features: tuple[str, ...] = ("slurm-bridge",),
) -> SlurmNode:
    return SlurmNode(
        name=name,
        state=list(states or ("IDLE", "EXTERNAL")),
        reason=reason,
        comment=comment,
        cpus=cpus,
        real_memory=mem,
        gres=gres,
        features=list(features),
    )


CASES: list[tuple[str, dict[str, Any], SlurmNode | None, list[nodesync.Action]]] = [
    # --- taint
    ("known, tainted: nothing", kube(), slurm(), []),
    ("known, untainted: add taint", kube(tainted=False), slurm(), [TAINT]),
    ("unknown, tainted: remove taint", kube(), None, [RemoveTaint()]),
    ("unknown, untainted: nothing", kube(tainted=False), None, []),
    # --- cordon
    ("cordon: drain with our reason", kube(cordoned=True), slurm(), [Drain(CORDON)]),
    ("cordon, already drained by us: nothing", kube(cordoned=True), slurm("n1", "IDLE", "DRAIN", reason=CORDON), []),
    (
        "cordon, foreign drain: reason kept",
        kube(cordoned=True),
        slurm("n1", "IDLE", "DRAIN", reason="admin: maintenance"),
        [],
    ),
    ("uncordon, our drain: undrain", kube(), slurm("n1", "IDLE", "DRAIN", reason=CORDON), [Undrain()]),
    (
        "uncordon, foreign drain: untouched",
        kube(),
        slurm("n1", "IDLE", "DRAIN", reason="admin: maintenance"),
        [],
    ),
    (
        "uncordon + untainted, our drain: both",
        kube(tainted=False),
        slurm("n1", "ALLOCATED", "DRAIN", reason=CORDON),
        [TAINT, Undrain()],
    ),
    # --- external registration
    ("external, unknown: create", kube(external=True, tainted=False), None, [CreateSlurmNode(CONF_4, REG_4)]),
    (
        "external, unknown, cordoned: created drained",
        kube(external=True, tainted=False, cordoned=True),
        None,
        [CreateSlurmNode(CONF_4, REG_4, drain_reason=CORDON)],
    ),
    (
        "external, unknown, no address: blocked",
        kube(external=True, tainted=False, address=None),
        None,
        [Blocked("no InternalIP/ExternalIP address and no resolver answer; NodeAddr is required")],
    ),
    (
        "external, registered, in step: nothing",
        kube(external=True),
        slurm(comment=REG_4),
        [],
    ),
    ("external, exists unrecorded (adopt)", kube(external=True), slurm(), [SetComment(REG_4)]),
    (
        "external, partitions changed: drain to register again (Slurm evaluates NodeSets at creation)",
        kube(external=True, annotations={wellknown.ANNOTATION_EXTERNAL_NODE_PARTITIONS: "a, b"}),
        slurm(comment=REG_4),
        [
            Drain(nodesync.drift_reason("n1", "partitions slurm-bridge->a,b", "partitions")),
            WaitDrained("drain just requested"),
        ],
    ),
    (
        "external, registered with no partition, annotated since: drain to register again",
        kube(external=True, annotations={wellknown.ANNOTATION_EXTERNAL_NODE_PARTITIONS: "a"}),
        slurm(comment=REG_4, features=()),
        [
            Drain(nodesync.drift_reason("n1", "partitions none->a", "partitions")),
            WaitDrained("drain just requested"),
        ],
    ),
    (
        "external, partitions and CPUs changed: one drain names both",
        kube(external=True, cpu="6", annotations={wellknown.ANNOTATION_EXTERNAL_NODE_PARTITIONS: "a"}),
        slurm(comment=REG_4),
        [
            Drain(nodesync.drift_reason("n1", "CPUs 4->6, partitions slurm-bridge->a")),
            WaitDrained("drain just requested"),
        ],
    ),
    (
        "external, partitions annotation removed: features kept (nothing to move to)",
        kube(external=True, annotations={}),
        slurm(comment=REG_4, features=("a",)),
        [],
    ),
    (
        "external, exists but not EXTERNAL (hybrid slurmd): taint and state only",
        kube(external=True, cordoned=True, cpu="6"),
        slurm("n1", "IDLE"),
        [Drain(CORDON)],
    ),
    (
        "external, cordoned: registration kept, drained",
        kube(external=True, cordoned=True),
        slurm(comment=REG_4),
        [Drain(CORDON)],
    ),
    # --- drift
    (
        "drift on an idle node: drain and wait",
        kube(external=True, cpu="6"),
        slurm(comment=REG_4),
        [Drain(nodesync.drift_reason("n1", "CPUs 4->6")), WaitDrained("drain just requested")],
    ),
    (
        "drift, still busy: wait",
        kube(external=True, cpu="6"),
        slurm("n1", "ALLOCATED", "EXTERNAL", "DRAIN", reason="slurm-bridge: x", comment=REG_4),
        [WaitDrained("state ALLOCATED+EXTERNAL+DRAIN")],
    ),
    (
        "drift, drained: delete and recreate",
        kube(external=True, memory="16Gi"),
        slurm("n1", "IDLE", "EXTERNAL", "DRAIN", reason="slurm-bridge: x", comment=REG_4),
        [
            DeleteSlurmNode(),
            CreateSlurmNode(
                CONF_4.replace("RealMemory=8192", "RealMemory=16384"),
                REG_4.replace("RealMemory=8192", "RealMemory=16384"),
            ),
        ],
    ),
    (
        "drift, drained by an admin: the admin's drain is re-applied",
        kube(external=True, cpu="6"),
        slurm("n1", "IDLE", "EXTERNAL", "DRAIN", reason="admin: maintenance", comment=REG_4),
        [
            DeleteSlurmNode(),
            CreateSlurmNode(
                CONF_4.replace("CoresPerSocket=4", "CoresPerSocket=6").replace("CPUs=4", "CPUs=6"),
                REG_4.replace("CPUs=4", "CPUs=6"),
                drain_reason="admin: maintenance",
            ),
        ],
    ),
    (
        "GRES drift against the registration (Slurm may not report GRES)",
        kube(external=True, extra={"nvidia.com/gpu": "2"}),
        slurm(comment=REG_4),
        [Drain(nodesync.drift_reason("n1", "Gres none->gpu:2")), WaitDrained("drain just requested")],
    ),
    (
        "GRES recorded, Slurm reports none: no drift",
        kube(external=True, extra={"nvidia.com/gpu": "2"}),
        slurm(comment=REG_4.replace("Gres=", "Gres=gpu:2")),
        [],
    ),
    (
        "unrecorded node: drift measured against Slurm",
        kube(external=True),
        slurm(cpus=8),
        [Drain(nodesync.drift_reason("n1", "CPUs 8->4")), WaitDrained("drain just requested")],
    ),
    # --- label removed
    (
        "label removed, registered: drain and wait",
        kube(),
        slurm(comment=REG_4),
        [Drain(nodesync.removed_reason("n1")), WaitDrained("drain just requested")],
    ),
    (
        "label removed, drained: delete (taint stays until Slurm forgets it)",
        kube(),
        slurm("n1", "IDLE", "EXTERNAL", "DRAIN", reason="slurm-bridge: y", comment=REG_4),
        [DeleteSlurmNode()],
    ),
    (
        "never labelled EXTERNAL node (dev stack, slurm.conf): never deleted",
        kube(),
        slurm(),
        [],
    ),
    (
        "slurm-nodename label picks the Slurm node",
        kube("k8s-a", slurm_name="n1", tainted=False),
        slurm(),
        [TAINT],
    ),
]


@pytest.mark.parametrize(("node", "current", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_plan(node: dict[str, Any], current: SlurmNode | None, expected: list[nodesync.Action]) -> None:
    assert nodesync.plan(node, current, SCHED) == expected


def test_taint_with_another_scheduler_is_replaced() -> None:
    node = kube(tainted=False)
    node["spec"]["taints"] = [{"key": wellknown.TAINT_MANAGED_NODE, "value": "other", "effect": "NoExecute"}]
    assert nodesync.plan(node, slurm(), SCHED) == [TAINT]


def test_node_conf_topology_gres_and_resolver() -> None:
    node = kube(
        external=True,
        address=None,
        cpu="3500m",
        memory="1G",
        extra={"nvidia.com/gpu": "1"},
        annotations={
            wellknown.ANNOTATION_EXTERNAL_NODE_PARTITIONS: "p1,p2",
            wellknown.ANNOTATION_TOPOLOGY_SPEC: "topo-switch:s1",
        },
    )
    (action,) = nodesync.plan(node, None, SCHED, resolve=lambda name: f"addr-of-{name}")
    assert action == CreateSlurmNode(
        "NodeName=n1 NodeAddr=addr-of-n1 Sockets=1 CoresPerSocket=4 ThreadsPerCore=1 CPUs=4 RealMemory=954 "
        'State=External Feature=p1,p2 Topology=topo-switch:s1 Gres="gpu:1"',
        "slurm-bridge: external node of Kubernetes node n1 (CPUs=4 RealMemory=954 Gres=gpu:1)",
    )


def test_bad_capacity_is_blocked() -> None:
    node = kube(external=True, cpu="lots", tainted=False)
    assert nodesync.plan(node, None, SCHED) == [Blocked("cannot read capacity: 'lots' is not a Kubernetes quantity "
                                                        "(e.g. 500m, 2, 1Gi, 512M)")]  # fmt: skip


@pytest.mark.parametrize(
    ("current", "expected"),
    [
        (slurm(comment=REG_4), [Drain(nodesync.deleted_reason("n1")), WaitDrained("drain just requested")]),
        (slurm("n1", "IDLE", "EXTERNAL", "DRAIN", comment=REG_4), [DeleteSlurmNode()]),
        (slurm(), []),
        (slurm("n1", "IDLE", comment=REG_4), []),
    ],
    ids=["registered: drain", "drained: delete", "not ours: kept", "not EXTERNAL: kept"],
)
def test_plan_orphan(current: SlurmNode, expected: list[nodesync.Action]) -> None:
    assert nodesync.plan_orphan(current) == expected


@pytest.mark.parametrize(
    ("raw", "normal"),
    [("", ""), ("(null)", ""), ("gpu:2(S:0)", "gpu:2"), ("shard:4,gpu:a100:2(S:0-1)", "gpu:a100:2,shard:4")],
)
def test_normalize_gres(raw: str, normal: str) -> None:
    assert nodesync.normalize_gres(raw) == normal


def test_registration_round_trip() -> None:
    reg = nodesync.parse_registration(REG_4)
    assert reg == nodesync.Registration("n1", nodesync.Resources(4, 8192, ""))
    assert nodesync.parse_registration("k8s uid=1") is None


# ------------------------------------------------------------------------------------------------ reconciler
class FakeKube:
    """The two calls the syncer's taint patch makes."""

    def __init__(self, nodes: dict[str, dict[str, Any]]) -> None:
        self.nodes = nodes
        self.patches: list[tuple[str, Any]] = []

    async def get(self, path: str, params: Any = None) -> dict[str, Any]:
        return self.nodes[path.rsplit("/", 1)[1]]

    async def patch(self, path: str, body: Any, patch_type: str = "merge") -> dict[str, Any]:
        name = path.rsplit("/", 1)[1]
        self.patches.append((name, body))
        node = self.nodes[name]
        node["spec"]["taints"] = body["spec"]["taints"] or []
        node["metadata"]["resourceVersion"] = str(int(node["metadata"].get("resourceVersion") or 0) + 1)
        return node


async def test_reconciler_registers_drifts_and_retires_with_fake_slurm() -> None:
    from workers.bridge.node_sync import NodeSyncer

    fake = FakeSlurmClient()
    fake.add_partition("slurm-bridge")
    node = kube("ext-1", external=True, tainted=False)
    node["metadata"]["resourceVersion"] = "1"
    kube_api = FakeKube({"ext-1": node})
    syncer = NodeSyncer(kube_api, fake, scheduler_name=SCHED)  # type: ignore[arg-type]
    syncer._nodes = kube_api.nodes
    syncer._listed = True

    async def settle() -> None:
        for _ in range(6):
            syncer.poke()
            await syncer.reconcile_once()

    await settle()
    created = await fake.get_node("ext-1")
    assert (created.cpus, created.real_memory, created.features) == (4, 8192, ["slurm-bridge"])
    assert created.comment.startswith(nodesync.COMMENT_PREFIX)
    assert nodesync.has_taint(node, SCHED) is True

    node["status"]["capacity"]["cpu"] = "6"
    await settle()
    assert (await fake.get_node("ext-1")).cpus == 6

    node["spec"]["unschedulable"] = True
    await settle()
    drained = await fake.get_node("ext-1")
    assert drained.is_drain and drained.reason == nodesync.cordon_reason("ext-1")
    node["spec"]["unschedulable"] = False
    await settle()
    assert not (await fake.get_node("ext-1")).is_drain

    del node["metadata"]["labels"][wellknown.LABEL_EXTERNAL_NODE]
    await settle()
    assert "ext-1" not in {n.name for n in await fake.list_nodes()}
    assert nodesync.has_taint(node, SCHED) is False
