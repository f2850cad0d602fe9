"""Whether a NodeSet's slurmd pods joined Slurm, as the NodeSet's ``SlurmdRegistered`` condition (pure).

A slurmd that runs but never registers (it cannot fetch its configuration, its key is wrong, it has no
``--conf-server``) leaves a pod that looks healthy to Kubernetes and a Slurm node that does not exist. The
operator notes since when each pod's Slurm node has been missing while its slurmd container runs; past
:data:`GRACE_SECONDS` the condition turns False naming the pods and quoting slurmd's own last log line, which is
where the cause is (``fetch_config: DNS SRV lookup failed``, ``Unable to contact slurm controller``...).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any, Final

CONDITION: Final = "SlurmdRegistered"
GRACE_SECONDS: Final = 30.0
"""How long a running slurmd may stay unregistered before the condition says so (a slurmd registers within a
second of its start; a configless fetch retries every 10 s)."""
SHOWN: Final = 3
"""Pods named in the message at most (the count says how many there are)."""


@dataclass(frozen=True)
class Unregistered:
    pod: str
    node: str
    seconds: float


def _running(pod: Mapping[str, Any], container: str) -> bool:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == container:
            return "running" in (status.get("state") or {})
    return False


def track(
    pods: Iterable[Mapping[str, Any]],
    hostname: Mapping[str, str],
    registered: Iterable[str],
    since: MutableMapping[str, float],
    now: float,
    *,
    container: str = "slurmd",
) -> list[Unregistered]:
    """Update ``since`` (Slurm node name -> when first seen missing while its slurmd ran) and return the pods past
    :data:`GRACE_SECONDS`, longest first. ``hostname`` maps each pod's name to its Slurm node's; a node that
    registers, or that no pod is for any more, is forgotten. A pod made again under the same name keeps its
    node's time, so a pod deleted and made again in a loop still shows."""
    known = set(registered)
    waiting: dict[str, str] = {}
    present: set[str] = set()
    for pod in pods:
        meta = pod.get("metadata") or {}
        name = str(meta.get("name") or "")
        node = hostname.get(name, name)
        present.add(node)
        if meta.get("deletionTimestamp") or node in known or not _running(pod, container):
            continue
        waiting[node] = name
    for node in [n for n in since if n in known or n not in present]:
        del since[node]
    out = []
    for node, pod_name in waiting.items():
        first = since.setdefault(node, now)
        if now - first >= GRACE_SECONDS:
            out.append(Unregistered(pod_name, node, now - first))
    return sorted(out, key=lambda u: (-u.seconds, u.pod))


def condition(found: list[Unregistered], quotes: Mapping[str, str]) -> tuple[str, str, str, str]:
    """(type, status, reason, message): True ``Registered``, or False ``NotRegistered`` naming the pods, how long,
    and slurmd's last log line of each (``quotes``: pod name -> line)."""
    if not found:
        return (CONDITION, "True", "Registered", "every running slurmd pod's node is in Slurm")
    parts = []
    for item in found[:SHOWN]:
        text = f"pod {item.pod}: slurmd runs but Slurm node {item.node} is not registered after {item.seconds:.0f}s"
        quote = quotes.get(item.pod, "").strip()
        parts.append(f"{text}; slurmd says: {quote}" if quote else text)
    more = f" (and {len(found) - SHOWN} more)" if len(found) > SHOWN else ""
    return (CONDITION, "False", "NotRegistered", "; ".join(parts) + more)


def last_words(log: str) -> str:
    """The line of slurmd's log tail that says most: the last ``error:``/``fatal:`` line, else the last line."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    for line in reversed(lines):
        if "error:" in line or "fatal:" in line:
            return line[:300]
    return lines[-1][:300] if lines else ""
