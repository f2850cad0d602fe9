"""What a NodeSet pod asks of its ``slurmd`` container, as pure functions (docs/dev-stack.md, "NodeSet pods").

The node agent runs a container named ``slurmd`` as a real ``slurmd -D`` in a network namespace of its own.
This module decides everything about it that needs no I/O: the pod's address in the pool, its Slurm node name,
the daemon's arguments (the container's ``args`` with ``NodeAddr``, ``CPUs`` and ``RealMemory`` merged into
``--conf``), the preStop command, restart decisions, whether Slurm reports the node registered, and the pod
status a kubelet would post. ``slinky.dev.slurmd_runtime`` does the I/O.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import ipaddress
import shlex
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Final, Literal

from slinky.clients.kube import rfc3339
from slinky.dev.daemons import daemon_container

Obj = dict[str, Any]

CONTAINER_NAME: Final = "slurmd"
"""A container of this name runs as a real slurmd, whatever its image; the other daemons are in
``slinky.dev.daemons``."""
POOL: Final = ipaddress.IPv4Network("10.226.28.0/22")
"""Pod addresses; apart from the ``slinky dev up --slurmd`` daemons' 10.226.27.0/24."""
BRIDGE: Final = "slkpbr0"
"""The host's bridge every pod's veth is attached to; it holds the pool's first address."""
BRIDGE_ADDRESS: Final = str(POOL[1])
BRIDGE_MAC: Final = "02:73:6c:6b:70:01"
"""Set, not inherited: a bridge otherwise takes its lowest port's MAC, which changes when that pod goes, and
the other pods' ARP entries for the gateway then point nowhere for ~20 s."""
POOL_SIZE: Final = POOL.num_addresses - 3
"""Pod addresses in the pool: all but the network address, the bridge's and the broadcast address."""
NETNS_PREFIX: Final = "slinky-pod-"
POD_FEATURE: Final = "nodeset-pod"
"""Added to every pod node's features: the dev slurm.conf's ``nodesets`` partition selects nodes by it."""
DEFAULT_CPUS: Final = 2
DEFAULT_MEMORY_MIB: Final = 1000
NOT_READY_STATES: Final = frozenset({"DOWN", "FUTURE", "UNKNOWN"})
"""Base states of a node that has not registered (or no longer responds)."""
UNKNOWN_EXIT_CODE: Final = 137
"""What a kubelet reports when a container vanished and its exit status is lost (ContainerStatusUnknown)."""
BACKOFF_SECONDS: Final = 10.0
MAX_BACKOFF_SECONDS: Final = 300.0


class PoolExhausted(RuntimeError):
    """Every address of the pod pool is taken."""


# ------------------------------------------------------------------------------------------------ addresses
def pod_address(index: int) -> str:
    """The pod address of slot ``index`` (0-based): the pool's third address onwards."""
    if not 0 <= index < POOL_SIZE:
        raise ValueError(f"slot {index} outside the pool (0..{POOL_SIZE - 1})")
    return str(POOL[index + 2])


def pod_mac(index: int) -> str:
    """The pod's eth0 MAC for slot ``index``: fixed per slot (so per address). A pod made again at its address
    (a StatefulSet's) with a new random MAC was unreachable for 35-55 s: neighbours kept the old one."""
    return f"02:73:6c:6b:{(index >> 8) & 0xFF:02x}:{index & 0xFF:02x}"


def netns_name(index: int) -> str:
    return f"{NETNS_PREFIX}{index}"


def host_ifname(index: int) -> str:
    """Host side of slot ``index``'s veth pair (<= 15 characters, the kernel's limit)."""
    return f"slkp{index}"


def peer_ifname(index: int) -> str:
    """Pod side of the pair until it is moved into the namespace and renamed ``eth0``."""
    return f"slkq{index}"


def slot_of(address: str | None) -> int | None:
    """The slot of a pool address, None for anything else."""
    try:
        ip = ipaddress.IPv4Address(address or "")
    except ValueError:
        return None
    slot = int(ip) - int(POOL.network_address) - 2
    return slot if ip in POOL and 0 <= slot < POOL_SIZE else None


def allocate_slot(
    used: Collection[int], after: int = -1, size: int = POOL_SIZE, *, preferred: int | None = None
) -> int:
    """``preferred`` if free (a pod started again keeps its address), else the first free slot after
    ``after``, wrapping around: an address is reused as late as possible."""
    if preferred is not None and 0 <= preferred < size and preferred not in used:
        return preferred
    for step in range(1, size + 1):
        slot = (after + step) % size
        if slot not in used:
            return slot
    raise PoolExhausted(f"all {size} pod addresses in {POOL} are in use")


# ------------------------------------------------------------------------------------------------ the pod
def slurmd_container(pod: Mapping[str, Any]) -> Obj | None:
    """The pod's daemon container (``slurmd``, or another of ``slinky.dev.daemons.DAEMONS``), if it has one."""
    found = daemon_container(pod)
    return found[1] if found is not None else None


def daemon_name(pod: Mapping[str, Any]) -> str:
    """The name of the pod's daemon container (``slurmd`` when it has none, for old status entries)."""
    found = daemon_container(pod)
    return found[0].container if found is not None else CONTAINER_NAME


def node_name(pod: Mapping[str, Any]) -> str:
    """The Slurm node name: the pod's ``spec.hostname``, else its name (the hostname a kubelet would set)."""
    return str((pod.get("spec") or {}).get("hostname") or pod["metadata"]["name"])


def literal_env(container: Mapping[str, Any]) -> dict[str, str]:
    """The container's env entries with a literal ``value`` (``valueFrom`` needs a kubelet: left out)."""
    return {e["name"]: str(e["value"]) for e in container.get("env") or [] if "name" in e and "value" in e}


def env_int(env: Mapping[str, str], name: str, default: int) -> int:
    """A positive integer from ``env``; absent, zero, negative or malformed gives ``default``."""
    try:
        value = int(env.get(name, ""))
    except ValueError:
        return default
    return value if value > 0 else default


def restart_policy(pod: Mapping[str, Any]) -> str:
    return str((pod.get("spec") or {}).get("restartPolicy") or "Always")


def grace_seconds(pod: Mapping[str, Any]) -> float:
    """The deletion's grace period: what the delete asked for, else the pod's, else Kubernetes' 30 s."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    for value in (meta.get("deletionGracePeriodSeconds"), spec.get("terminationGracePeriodSeconds")):
        if value is not None:
            return float(value)
    return 30.0


def prestop_command(container: Mapping[str, Any]) -> list[str] | None:
    """``lifecycle.preStop.exec.command``, or None (no hook, or an httpGet hook, which has nothing to call)."""
    command = (((container.get("lifecycle") or {}).get("preStop") or {}).get("exec") or {}).get("command")
    return [str(c) for c in command] if command else None


def container_status(pod: Mapping[str, Any]) -> Obj:
    """The daemon container's entry of ``status.containerStatuses`` ({} before the first one)."""
    name = daemon_name(pod)
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == name:
            return dict(status)
    return {}


def running_since(pod: Mapping[str, Any]) -> float | None:
    """When the status says the current slurmd started (``state.running.startedAt``), if it says so."""
    started = ((container_status(pod).get("state") or {}).get("running") or {}).get("startedAt")
    try:
        return dt.datetime.fromisoformat(str(started).replace("Z", "+00:00")).timestamp() if started else None
    except ValueError:
        return None


def restart_count(pod: Mapping[str, Any]) -> int:
    return int(container_status(pod).get("restartCount") or 0)


def is_ready(pod: Mapping[str, Any]) -> bool:
    return bool(container_status(pod).get("ready"))


def is_running(pod: Mapping[str, Any], address: str) -> bool:
    """Whether the pod status already says slurmd runs at ``address``."""
    status = pod.get("status") or {}
    running = "running" in (container_status(pod).get("state") or {})
    return status.get("phase") == "Running" and status.get("podIP") == address and running


def is_terminated(pod: Mapping[str, Any]) -> bool:
    return "terminated" in (container_status(pod).get("state") or {})


# ------------------------------------------------------------------------------------------------ arguments
def _unquote(text: str) -> str:
    """Drop one pair of quotes around the whole value (upstream quotes ``--conf`` for its entrypoint's shell)."""
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1].strip()
    return text


def parse_conf(text: str) -> list[tuple[str, str]]:
    """``"Features=a Weight=10"`` -> ``[("Features", "a"), ("Weight", "10")]``; quotes group as in a shell."""
    try:
        tokens = shlex.split(_unquote(text))
    except ValueError:  # an unbalanced quote: fall back to plain words
        tokens = _unquote(text).split()
    return [(key, value) for key, _, value in (token.partition("=") for token in tokens)]


def format_conf(pairs: Sequence[tuple[str, str]]) -> str:
    return " ".join(f"{key}={value}" for key, value in pairs)


def merge_conf(text: str, *, overrides: Mapping[str, str], defaults: Mapping[str, str]) -> str:
    """Set ``overrides`` (replacing any value, keys matched case-insensitively) and add each of ``defaults``
    the text does not set already; the text's own order is kept, new keys follow it."""
    pairs = parse_conf(text)
    wanted = {key.lower(): (key, value) for key, value in overrides.items()}
    merged: list[tuple[str, str]] = []
    for key, value in pairs:
        if key.lower() in wanted:
            merged.append(wanted.pop(key.lower()))
        else:
            merged.append((key, value))
    have = {key.lower() for key, _ in merged}
    merged += [wanted[k] for k in wanted]
    merged += [(key, value) for key, value in defaults.items() if key.lower() not in have]
    return format_conf(merged)


def with_feature(text: str, feature: str) -> str:
    """Add ``feature`` to the ``Features`` (or ``Feature``) value, or add ``Features=<feature>``."""
    pairs = parse_conf(text)
    for i, (key, value) in enumerate(pairs):
        if key.lower() in ("feature", "features"):
            names = [n for n in value.split(",") if n]
            pairs[i] = (key, ",".join(names if feature in names else [*names, feature]))
            return format_conf(pairs)
    return format_conf([*pairs, ("Features", feature)])


def slurmd_args(container: Mapping[str, Any], address: str) -> list[str]:
    """The daemon's arguments: ``-D``, then the container's ``args`` as given with ``--conf`` merged.

    ``NodeAddr`` is always the pod's address; ``CPUs`` and ``RealMemory`` come from the container's
    ``POD_CPUS`` and ``POD_MEMORY`` (MiB) unless ``--conf`` sets them itself; :data:`POD_FEATURE` joins the
    features. Of several ``--conf``, the last counts, as in slurmd; a missing one is added.
    """
    args = [str(a) for a in container.get("args") or []]
    env = literal_env(container)
    kept: list[str] = []
    conf = ""
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--conf" and i + 1 < len(args):
            conf, i = args[i + 1], i + 2
            continue
        if arg.startswith("--conf="):
            conf = arg[len("--conf=") :]
        elif arg != "-D":
            kept.append(arg)
        i += 1
    merged = merge_conf(
        conf,
        overrides={"NodeAddr": address},
        defaults={
            "CPUs": str(env_int(env, "POD_CPUS", DEFAULT_CPUS)),
            "RealMemory": str(env_int(env, "POD_MEMORY", DEFAULT_MEMORY_MIB)),
        },
    )
    return ["-D", *kept, "--conf", with_feature(merged, POD_FEATURE)]


def hosts_file(hostname: str, address: str, controller: str) -> str:
    """The pod's /etc/hosts: itself, and the controller's name at the bridge (slurmctld listens there too)."""
    return f"127.0.0.1 localhost\n{BRIDGE_ADDRESS} {controller}\n{address} {hostname}\n"


# ------------------------------------------------------------------------------------------------ decisions
def _number(value: Any) -> float:
    """A Slurm ``{set, infinite, number}`` field's number (0 when unset)."""
    if isinstance(value, Mapping):
        return float(value.get("number") or 0) if value.get("set", True) else 0.0
    return float(value or 0)


def node_registered(node: Mapping[str, Any] | None, address: str, since: float) -> bool:
    """Whether Slurm's node (``scontrol --json show node NAME``) has registered from this very slurmd.

    Registered: a base state other than DOWN/FUTURE/UNKNOWN, responding, this pod's address, and a slurmd
    start time no earlier than ``since`` (the process's start): a node left over from an earlier run or an
    earlier pod of the same name does not count.
    """
    if not node:
        return False
    states = [str(s).upper() for s in node.get("state") or []]
    if not states or states[0] in NOT_READY_STATES or "NOT_RESPONDING" in states:
        return False
    return node.get("address") == address and _number(node.get("slurmd_start_time")) >= int(since)


def log_tail_message(text: str, lines: int = 5) -> str:
    """A failed container's termination message from its log: the last lines that say ``error`` or
    ``fatal`` (Slurm's daemons end with the cause there), else the last lines, at most 4 KiB (a kubelet's
    ``FallbackToLogsOnError`` takes the log's tail too)."""
    all_lines = [line.strip() for line in text.splitlines() if line.strip()]
    wanted = [line for line in all_lines if "fatal" in line.lower() or "error" in line.lower()]
    return "\n".join((wanted or all_lines)[-lines:])[-4096:]


def should_restart(policy: str, exit_code: int) -> bool:
    """A kubelet's rule: Always restarts, OnFailure restarts on a non-zero code, Never does not."""
    return policy == "Always" or (policy == "OnFailure" and exit_code != 0)


def restart_delay(restarts: int) -> float:
    """CrashLoopBackOff: the first restart at once, then 10 s doubling up to 5 min."""
    if restarts <= 0:
        return 0.0
    return float(min(BACKOFF_SECONDS * 2 ** (restarts - 1), MAX_BACKOFF_SECONDS))


# ------------------------------------------------------------------------------------------------ status
@dataclasses.dataclass(frozen=True)
class Termination:
    """How a slurmd process ended."""

    exit_code: int
    finished_at: float
    started_at: float
    reason: str = ""
    """Empty: Completed or Error from the code."""
    message: str = ""
    """The end of the container's log on an error (a kubelet's ``FallbackToLogsOnError``)."""

    def as_state(self) -> Obj:
        reason = self.reason or ("Completed" if self.exit_code == 0 else "Error")
        state: Obj = {
            "exitCode": self.exit_code,
            "reason": reason,
            "startedAt": rfc3339(self.started_at),
            "finishedAt": rfc3339(self.finished_at),
        }
        if reason == "ContainerStatusUnknown":
            state["message"] = "The container could not be located when the pod was terminated"
        elif self.message:
            state["message"] = self.message
        return {"terminated": state}


@dataclasses.dataclass(frozen=True)
class SlurmdView:
    """What the pod status says of its slurmd container."""

    address: str
    state: Literal["running", "waiting", "terminated"]
    started_at: float
    ready: bool = False
    restart_count: int = 0
    termination: Termination | None = None
    """How it ended (state ``terminated``)."""
    last_state: Obj | None = None
    """How the previous run ended (``lastState``), kept across restarts."""
    waiting_reason: str = "CrashLoopBackOff"


def _condition(
    type_: str, ok: bool, now: float, previous: Mapping[str, Any] | None = None, container: str = CONTAINER_NAME
) -> Obj:
    """A pod condition; its transition time is kept while its status does not change."""
    status = "True" if ok else "False"
    since = (previous or {}).get("lastTransitionTime") if (previous or {}).get("status") == status else None
    cond: Obj = {"type": type_, "status": status, "lastProbeTime": None}
    cond["lastTransitionTime"] = since or rfc3339(now)
    if not ok and type_ in ("Ready", "ContainersReady"):
        cond["reason"] = "ContainersNotReady"
        cond["message"] = f"containers with unready status: [{container}]"
    return cond


def _slurmd_status(container: Mapping[str, Any], view: SlurmdView, container_id: str) -> Obj:
    status: Obj = {
        "name": container["name"],
        "image": container.get("image", ""),
        "imageID": "",
        "containerID": container_id,
        "ready": view.ready and view.state == "running",
        "started": view.state == "running",
        "restartCount": view.restart_count,
    }
    if view.state == "running":
        status["state"] = {"running": {"startedAt": rfc3339(view.started_at)}}
    elif view.state == "waiting":
        status["state"] = {"waiting": {"reason": view.waiting_reason}}
    elif view.termination is not None:
        status["state"] = view.termination.as_state()
    if view.last_state:
        status["lastState"] = view.last_state
    return status


def _other_status(container: Mapping[str, Any], start: str, view: SlurmdView) -> Obj:
    """A container next to slurmd: simulated, it runs (and ends) with the pod."""
    state: Obj = {"running": {"startedAt": start}}
    if view.state == "terminated" and view.termination is not None:
        state = {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": start}}
        state["terminated"]["finishedAt"] = rfc3339(view.termination.finished_at)
    return {
        "name": container["name"],
        "image": container.get("image", ""),
        "imageID": "",
        "containerID": "",
        "ready": "running" in state,
        "started": "running" in state,
        "restartCount": 0,
        "state": state,
    }


KUBELET_CONDITIONS = frozenset({"Initialized", "Ready", "ContainersReady", "PodScheduled"})


def pod_status(pod: Mapping[str, Any], view: SlurmdView, now: float, *, keep_phase: bool = False) -> Obj:
    """The status patch a kubelet would post for a pod whose slurmd is in ``view``, as a JSON merge patch: every
    list is whole and replaces the current one (a strategic merge would add a new address to ``podIPs``).

    Phase: Running while slurmd runs or waits for a restart; Succeeded or Failed by its exit code once it
    ended for good; ``keep_phase`` leaves it as it is (a pod stopped for deletion).
    """
    status = pod.get("status") or {}
    start = status.get("startTime") or rfc3339(view.started_at)
    ready = view.ready and view.state == "running"
    if view.state != "terminated":
        computed = "Running"
    else:
        computed = "Succeeded" if view.termination is not None and view.termination.exit_code == 0 else "Failed"
    previous = {c.get("type"): c for c in status.get("conditions") or []}
    containers = (pod.get("spec") or {}).get("containers") or []
    name = daemon_name(pod)
    container_id = f"slinky://{pod['metadata']['uid'][:8]}-{name}"
    patch: Obj = {
        "hostIP": "127.0.0.1",
        "podIP": view.address,
        "podIPs": [{"ip": view.address}],
        "startTime": start,
        "conditions": [
            *(
                _condition(type_, ok, now, previous.get(type_), name)
                for type_, ok in (
                    ("Initialized", True),
                    ("Ready", ready),
                    ("ContainersReady", ready),
                    ("PodScheduled", True),
                )
            ),
            # Conditions a kubelet does not own (the operator's SlurmNodeState*) are kept, as a kubelet does.
            *(c for t, c in previous.items() if t not in KUBELET_CONDITIONS),
        ],
        "containerStatuses": [
            _slurmd_status(c, view, container_id) if c.get("name") == name else _other_status(c, start, view)
            for c in containers
        ],
    }
    inits = (pod.get("spec") or {}).get("initContainers") or []
    if inits:
        patch["initContainerStatuses"] = [
            {
                "name": c["name"],
                "image": c.get("image", ""),
                "imageID": "",
                "ready": True,
                "restartCount": 0,
                "state": {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": start}},
            }
            for c in inits
        ]
    if not keep_phase:
        patch["phase"] = computed
    return {"status": patch}
