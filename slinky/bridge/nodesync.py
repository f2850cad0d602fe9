"""Kubernetes → Slurm node sync: the decisions, without I/O (upstream slurm-bridge node controller).

:func:`plan` looks at one Kubernetes node and the Slurm node of the same Slurm name (or ``None``) and
returns the actions that bring Slurm's view in step with Kubernetes'. :func:`plan_orphan` does the same
for a Slurm node that no Kubernetes node maps to any more. The reconciler (``workers/bridge/node_sync.py``)
applies the actions and calls the planner again on every pass, so every rule is level-triggered: a
"wait until drained" is simply a pass that returns :class:`WaitDrained` and nothing else.

The rules (docs/node-sync.md):

* **Cordon.** ``spec.unschedulable`` drains the Slurm node with :func:`cordon_reason`. Uncordon
  undrains it only when the current reason starts with :data:`REASON_PREFIX`; a drain somebody else set
  (an admin's ``admin: maintenance``) is never overwritten nor lifted.
* **Taint.** A Kubernetes node whose Slurm name exists in Slurm carries
  ``slinky.slurm.net/managed-node=<scheduler>:NoExecute``; any other node loses it.
* **External nodes.** A node labelled ``scheduler.slinky.slurm.net/external-node`` and unknown to Slurm
  is registered with ``new/node`` (:func:`node_conf`, always with ``NodeAddr``). The Slurm node's
  ``comment`` then records what was registered (:func:`registration_comment`): it marks the node as
  the bridge's own and is what resource drift is measured against.
* **Drift.** When CPUs, RealMemory or GRES differ, the Slurm node is drained, waited on until drained,
  deleted and created again.
* **Removal.** When the label goes away (or the Kubernetes node is deleted) and the Slurm node is an
  ``EXTERNAL`` node the bridge registered, it is drained, waited on and deleted. Nodes the bridge did
  not register (slurm.conf lines, ``scontrol create``) are never deleted.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from slinky import wellknown
from slinky.bridge.translate.errors import InvalidQuantity
from slinky.bridge.translate.nodes import slurm_node_name
from slinky.bridge.translate.quantity import cpu_cores, memory_mib, parse_quantity
from slinky.clients.slurm.models import Node as SlurmNode

REASON_PREFIX: Final = "slurm-bridge:"
"""Marks the drains the bridge owns: only these are ever undrained by the bridge."""
TAINT_EFFECT: Final = "NoExecute"
RESOURCE_GPU: Final = "nvidia.com/gpu"
COMMENT_PREFIX: Final = "slurm-bridge: external node of Kubernetes node "
"""Start of the Slurm ``comment`` of every external node the bridge registered (new key, this module only)."""

_COMMENT: Final = re.compile(
    re.escape(COMMENT_PREFIX) + r"(?P<kube>\S+) \(CPUs=(?P<cpus>\d+) RealMemory=(?P<mem>\d+) Gres=(?P<gres>\S*)\)$"
)
_ADDRESS_TYPES: Final = ("InternalIP", "ExternalIP")

Resolver = Callable[[str], str | None]
"""Maps a Slurm node name to an address when the Kubernetes node reports none."""


# ------------------------------------------------------------------------------------------------ actions
@dataclass(frozen=True)
class Drain:
    """Set DRAIN with this reason: no new jobs; running jobs keep running."""

    reason: str


@dataclass(frozen=True)
class Undrain:
    """Lift the bridge's own drain (state ``UNDRAIN``)."""


@dataclass(frozen=True)
class AddTaint:
    """Put ``key=value:effect`` on the Kubernetes node, replacing any other taint with this key."""

    key: str
    value: str
    effect: str = TAINT_EFFECT


@dataclass(frozen=True)
class RemoveTaint:
    """Drop every taint with this key from the Kubernetes node."""

    key: str = wellknown.TAINT_MANAGED_NODE


@dataclass(frozen=True)
class CreateSlurmNode:
    """``POST new/node`` with ``node_conf``, then record ``comment``; then drain if ``drain_reason``."""

    node_conf: str
    comment: str
    drain_reason: str | None = None


@dataclass(frozen=True)
class SetComment:
    """Record the registration on an existing external node (adopts it)."""

    comment: str


@dataclass(frozen=True)
class DeleteSlurmNode:
    """``DELETE node/{name}``; planned only once the node is drained."""


@dataclass(frozen=True)
class WaitDrained:
    """Jobs still hold a draining node; nothing to do until a later pass finds it drained."""

    why: str


@dataclass(frozen=True)
class Blocked:
    """The node cannot be registered as asked (no address, bad capacity); nothing is done."""

    why: str


Action = (
    Drain | Undrain | AddTaint | RemoveTaint | CreateSlurmNode | SetComment | DeleteSlurmNode | WaitDrained | Blocked
)


def describe(action: Action) -> str:
    """One short line for the log."""
    match action:
        case Drain(reason=reason):
            return f"drain ({reason})"
        case Undrain():
            return "undrain"
        case AddTaint(key=key, value=value, effect=effect):
            return f"add taint {key}={value}:{effect}"
        case RemoveTaint(key=key):
            return f"remove taint {key}"
        case CreateSlurmNode(node_conf=conf):
            return f"create external node: {conf}"
        case SetComment(comment=comment):
            return f"record registration: {comment}"
        case DeleteSlurmNode():
            return "delete Slurm node"
        case WaitDrained(why=why):
            return f"wait until drained ({why})"
        case Blocked(why=why):
            return f"blocked: {why}"


# ------------------------------------------------------------------------------------------------ reasons
def cordon_reason(kube_name: str) -> str:
    return f"{REASON_PREFIX} Corresponding Kubernetes node ({kube_name}) is unschedulable"


def drift_reason(kube_name: str, changes: str, what: str = "resources") -> str:
    return f"{REASON_PREFIX} Kubernetes node ({kube_name}) {what} changed ({changes}); recreating"


def removed_reason(kube_name: str) -> str:
    return f"{REASON_PREFIX} Kubernetes node ({kube_name}) is no longer an external node"


def deleted_reason(kube_name: str) -> str:
    return f"{REASON_PREFIX} Kubernetes node ({kube_name}) was deleted"


def is_ours(reason: str) -> bool:
    """Whether a drain reason was set by the bridge."""
    return reason.startswith(REASON_PREFIX)


# ------------------------------------------------------------------------------------------------ desired
@dataclass(frozen=True)
class Resources:
    """What drift is measured on."""

    cpus: int
    real_memory: int
    gres: str

    def diff(self, other: Resources) -> str:
        """``"CPUs 4->6"``-style text of what differs from ``other`` (the current value); empty if equal."""
        parts = [
            f"{label} {old or 'none'}->{new or 'none'}"
            for label, old, new in (
                ("CPUs", other.cpus, self.cpus),
                ("RealMemory", other.real_memory, self.real_memory),
                ("Gres", other.gres, self.gres),
            )
            if old != new
        ]
        return ", ".join(parts)


@dataclass(frozen=True)
class ExternalSpec:
    """The Slurm external node a labelled Kubernetes node asks for."""

    kube_name: str
    name: str
    address: str
    resources: Resources
    features: tuple[str, ...]
    topology: str


def normalize_gres(gres: str) -> str:
    """Slurm's GRES string without socket bindings, sorted: ``"gpu:2(S:0),shard:4"`` → ``"gpu:2,shard:4"``."""
    items = [re.sub(r"\(.*?\)", "", item).strip() for item in gres.split(",")]
    return ",".join(sorted(item for item in items if item and item != "(null)"))


def node_address(node: Mapping[str, Any], resolve: Resolver | None = None) -> str | None:
    """InternalIP, else ExternalIP, else the resolver's answer for the Slurm name."""
    addresses = (node.get("status") or {}).get("addresses") or []
    for kind in _ADDRESS_TYPES:
        for entry in addresses:
            if entry.get("type") == kind and entry.get("address"):
                return str(entry["address"])
    return resolve(slurm_node_name(node)) if resolve else None


def partitions(node: Mapping[str, Any]) -> tuple[str, ...]:
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    raw = str(annotations.get(wellknown.ANNOTATION_EXTERNAL_NODE_PARTITIONS) or "")
    return tuple(p.strip() for p in raw.split(",") if p.strip())


def desired_resources(node: Mapping[str, Any]) -> Resources:
    """CPUs, MiB and ``gpu:N`` from ``status.capacity``.

    Raises:
        InvalidQuantity: A capacity is missing or not a quantity.
    """
    capacity = (node.get("status") or {}).get("capacity") or {}
    if "cpu" not in capacity or "memory" not in capacity:
        raise InvalidQuantity("status.capacity has no cpu or memory")
    gpus = math.ceil(parse_quantity(capacity[RESOURCE_GPU])) if RESOURCE_GPU in capacity else 0
    return Resources(
        cpus=cpu_cores(capacity["cpu"]), real_memory=memory_mib(capacity["memory"]), gres=f"gpu:{gpus}" if gpus else ""
    )


def external_spec(node: Mapping[str, Any], resolve: Resolver | None = None) -> ExternalSpec | Blocked:
    metadata = node.get("metadata") or {}
    try:
        resources = desired_resources(node)
    except InvalidQuantity as err:
        return Blocked(f"cannot read capacity: {err}")
    if resources.cpus < 1 or resources.real_memory < 1:
        return Blocked("capacity cpu and memory must be positive")
    address = node_address(node, resolve)
    if not address:
        return Blocked("no InternalIP/ExternalIP address and no resolver answer; NodeAddr is required")
    return ExternalSpec(
        kube_name=str(metadata.get("name", "")),
        name=slurm_node_name(node),
        address=address,
        resources=resources,
        features=partitions(node),
        topology=str((metadata.get("annotations") or {}).get(wellknown.ANNOTATION_TOPOLOGY_SPEC) or ""),
    )


def node_conf(spec: ExternalSpec) -> str:
    """The ``new/node`` line (upstream ``AddNode`` plus ``NodeAddr``)."""
    cpus = spec.resources.cpus
    parts = [
        f"NodeName={spec.name}",
        f"NodeAddr={spec.address}",
        "Sockets=1",
        f"CoresPerSocket={cpus}",
        "ThreadsPerCore=1",
        f"CPUs={cpus}",
        f"RealMemory={spec.resources.real_memory}",
        "State=External",
    ]
    if spec.features:
        parts.append(f"Feature={','.join(spec.features)}")
    if spec.topology:
        parts.append(f"Topology={spec.topology}")
    parts.append(f'Gres="{spec.resources.gres}"')
    return " ".join(parts)


def registration_comment(spec: ExternalSpec) -> str:
    r = spec.resources
    return f"{COMMENT_PREFIX}{spec.kube_name} (CPUs={r.cpus} RealMemory={r.real_memory} Gres={r.gres})"


@dataclass(frozen=True)
class Registration:
    """What :func:`registration_comment` recorded on a Slurm node."""

    kube_name: str
    resources: Resources


def parse_registration(comment: str) -> Registration | None:
    match = _COMMENT.match(comment)
    if match is None:
        return None
    return Registration(
        kube_name=match["kube"],
        resources=Resources(int(match["cpus"]), int(match["mem"]), match["gres"]),
    )


def registered_by_bridge(slurm: SlurmNode) -> Registration | None:
    """The registration of an EXTERNAL node the bridge created or adopted, else None."""
    return parse_registration(slurm.comment) if slurm.is_external else None


# ------------------------------------------------------------------------------------------------ planning
def has_taint(node: Mapping[str, Any], scheduler_name: str) -> bool | None:
    """True: exactly our taint; False: no taint with our key; None: our key with another value/effect."""
    mine = [t for t in (node.get("spec") or {}).get("taints") or [] if t.get("key") == wellknown.TAINT_MANAGED_NODE]
    if not mine:
        return False
    ok = len(mine) == 1 and mine[0].get("value") == scheduler_name and mine[0].get("effect") == TAINT_EFFECT
    return True if ok else None


def _taint_actions(node: Mapping[str, Any], known: bool, scheduler_name: str) -> list[Action]:
    state = has_taint(node, scheduler_name)
    if known:
        return [] if state is True else [AddTaint(wellknown.TAINT_MANAGED_NODE, scheduler_name)]
    return [] if state is False else [RemoveTaint()]


def _state_actions(node: Mapping[str, Any], slurm: SlurmNode) -> list[Action]:
    name = str((node.get("metadata") or {}).get("name", ""))
    if (node.get("spec") or {}).get("unschedulable"):
        # An existing drain is kept as it is: overwriting a foreign reason would let an uncordon lift it.
        return [] if slurm.is_drain else [Drain(cordon_reason(name))]
    if slurm.is_drain and is_ours(slurm.reason):
        return [Undrain()]
    return []


def _retire(slurm: SlurmNode, reason: str) -> list[Action]:
    """Drain (keeping any drain already set), wait, then delete."""
    if not slurm.is_drain:
        return [Drain(reason), WaitDrained("drain just requested")]
    if not slurm.is_drained:
        return [WaitDrained(f"state {'+'.join(slurm.state)}")]
    return [DeleteSlurmNode()]


def _current_resources(slurm: SlurmNode) -> Resources:
    registration = parse_registration(slurm.comment)
    if registration is not None:
        return registration.resources
    return Resources(slurm.cpus, slurm.real_memory, normalize_gres(slurm.gres))


def _external_actions(spec: ExternalSpec, slurm: SlurmNode) -> list[Action]:
    """Drift → retire and recreate (returned alone); else record the registration.

    New partitions are drift too: slurmctld puts a node in a ``NodeSet=<p> Feature=<p>`` partition when the node is
    created (or on ``scontrol reconfigure``), not when its features change (measured on 26.05: a node updated to
    ``ActiveFeatures=p`` stayed in no partition), so the node is registered again with its new Feature.
    """
    changes, what = spec.resources.diff(_current_resources(slurm)), "resources"
    if spec.features and set(spec.features) != set(slurm.features):
        moved = f"partitions {','.join(sorted(slurm.features)) or 'none'}->{','.join(spec.features)}"
        changes, what = (f"{changes}, {moved}", "resources") if changes else (moved, "partitions")
    if changes:
        retire = _retire(slurm, drift_reason(spec.kube_name, changes, what))
        if retire == [DeleteSlurmNode()]:
            # A drain somebody else set survives the recreation.
            keep = slurm.reason if slurm.reason and not is_ours(slurm.reason) else None
            retire.append(CreateSlurmNode(node_conf(spec), registration_comment(spec), drain_reason=keep))
        return retire
    actions: list[Action] = []
    comment = registration_comment(spec)
    if slurm.comment != comment:
        actions.append(SetComment(comment))
    return actions


def plan(
    node: Mapping[str, Any],
    slurm: SlurmNode | None,
    scheduler_name: str = wellknown.SCHEDULER_NAME,
    *,
    resolve: Resolver | None = None,
) -> list[Action]:
    """The actions for one Kubernetes node; ``slurm`` is the Slurm node of its Slurm name, if any.

    The list is applied in order and stops at the first failure; the next pass plans again.
    """
    labels = (node.get("metadata") or {}).get("labels") or {}
    external = wellknown.LABEL_EXTERNAL_NODE in labels
    if slurm is None:
        if external:
            spec = external_spec(node, resolve)
            if isinstance(spec, Blocked):
                return [spec, *_taint_actions(node, False, scheduler_name)]
            # A node that is cordoned when it is registered starts drained: no job slips in between.
            cordoned = bool((node.get("spec") or {}).get("unschedulable"))
            drain = cordon_reason(spec.kube_name) if cordoned else None
            return [CreateSlurmNode(node_conf(spec), registration_comment(spec), drain_reason=drain)]
        return _taint_actions(node, False, scheduler_name)

    taint = _taint_actions(node, True, scheduler_name)
    if external and slurm.is_external:
        spec = external_spec(node, resolve)
        if isinstance(spec, Blocked):
            return [*taint, spec, *_state_actions(node, slurm)]
        actions = _external_actions(spec, slurm)
        if actions and isinstance(actions[-1], WaitDrained | CreateSlurmNode | DeleteSlurmNode):
            return [*taint, *actions]
        return [*taint, *actions, *_state_actions(node, slurm)]
    if not external and registered_by_bridge(slurm) is not None:
        return [*taint, *_retire(slurm, removed_reason(str(node["metadata"]["name"])))]
    return [*taint, *_state_actions(node, slurm)]


def plan_orphan(slurm: SlurmNode) -> list[Action]:
    """A Slurm node no Kubernetes node maps to: retire it if the bridge registered it, else leave it."""
    registration = registered_by_bridge(slurm)
    if registration is None:
        return []
    return _retire(slurm, deleted_reason(registration.kube_name))


def is_progress(actions: Sequence[Action]) -> bool:
    """Whether applying ``actions`` changes anything (WaitDrained and Blocked do not)."""
    return any(not isinstance(a, WaitDrained | Blocked) for a in actions)
