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
FORGET_SECONDS: Final = 4 * GRACE_SECONDS
"""A node not seen unregistered this long is forgotten (scaled away); a pod the drift repair deletes and makes
again is back well within it (its deletion waits for the kubelet's status sync, up to 10 s, and more under load)."""
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
    since: MutableMapping[str, tuple[float, float, str]],
    now: float,
    *,
    container: str = "slurmd",
    grace: float = GRACE_SECONDS,
) -> list[Unregistered]:
    """Update ``since`` (Slurm node name -> (first seen missing while its slurmd ran, last seen so, its pod)) and
    return the nodes past :data:`GRACE_SECONDS`, longest first, whether or not their pod runs at this moment: the
    drift repair deletes such a pod and makes it again, and the condition must not flap meanwhile. ``hostname``
    maps each pod's name to its Slurm node's. A node that registers is forgotten at once; one not seen
    unregistered for :data:`FORGET_SECONDS` (4 ``grace`` periods) is forgotten too (scaled away)."""
    forget = FORGET_SECONDS * grace / GRACE_SECONDS
    known = set(registered)
    waiting: dict[str, str] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        name = str(meta.get("name") or "")
        node = hostname.get(name, name)
        if meta.get("deletionTimestamp") or node in known or not _running(pod, container):
            continue
        waiting[node] = name
    gone = [n for n, (_, last, _) in since.items() if n not in waiting and now - last > forget]
    for node in [n for n in since if n in known] + gone:
        del since[node]
    for node, pod_name in waiting.items():
        first = since[node][0] if node in since else now
        since[node] = (first, now, pod_name)
    out = [Unregistered(pod, node, now - first) for node, (first, _, pod) in since.items() if now - first >= grace]
    return sorted(out, key=lambda u: (-u.seconds, u.pod))


def condition(
    found: list[Unregistered], quotes: Mapping[str, str], grace: float = GRACE_SECONDS
) -> tuple[str, str, str, str]:
    """(type, status, reason, message): True ``Registered``, or False ``NotRegistered`` naming the pods and
    slurmd's last log line of each (``quotes``: pod name -> line). The message says "for more than" the grace
    period, not how long: it changes only when the pods or slurmd's words do (each change is a status write)."""
    if not found:
        return (CONDITION, "True", "Registered", "every running slurmd pod's node is in Slurm")
    parts = []
    for item in found[:SHOWN]:
        text = f"pod {item.pod}: slurmd runs but Slurm node {item.node} has not registered for more than {grace:.0f}s"
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
