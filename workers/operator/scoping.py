"""Namespace scoping of the operator's watches (setting `operator.namespaces`, upstream's `--namespaces`).

Unscoped, a controller watches a resource cluster-wide with one list+watch; scoped, it runs one list+watch
per namespace, and a relist of one namespace replaces only that namespace's part of the cache.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

Obj = dict[str, Any]
Key = tuple[str, str]


def watch_paths(path: str, namespaces: Sequence[str], *, cluster_scoped: bool = False) -> list[tuple[str | None, str]]:
    """`(namespace, path)` to watch: `[(None, path)]` unscoped (or for a cluster-scoped resource, such as
    nodes), else the namespaced path of each namespace.

    `/api/v1/pods` -> `/api/v1/namespaces/<ns>/pods`; `/apis/g/v/nodesets` -> `/apis/g/v/namespaces/<ns>/nodesets`.
    """
    if not namespaces or cluster_scoped:
        return [(None, path)]
    base, plural = path.rstrip("/").rsplit("/", 1)
    return [(ns, f"{base}/namespaces/{ns}/{plural}") for ns in dict.fromkeys(namespaces)]


def in_scope(namespace: str, namespaces: Sequence[str]) -> bool:
    return not namespaces or namespace in namespaces


def replace_synced(cache: dict[Key, Obj], items: Iterable[Obj], namespace: str | None) -> None:
    """A relist: the listed objects replace the cache's (all of it, or one namespace's part)."""
    for key in [k for k in cache if namespace is None or k[0] == namespace]:
        del cache[key]
    for obj in items:
        cache[(obj["metadata"].get("namespace", ""), obj["metadata"]["name"])] = obj
