"""Why an object's pods do not start, as the object's ``PodsHealthy`` condition (pure).

A kubelet reports a container that cannot run as *waiting* with a reason: its image cannot be pulled
(``ErrImagePull``, then ``ImagePullBackOff``), or it keeps exiting (``CrashLoopBackOff``), or its
configuration is refused (``CreateContainerConfigError``...). Only ``kubectl describe pod`` shows that; the
operator copies it onto the custom resource that made the pod (NodeSet, Controller, RestApi, Accounting,
LoginSet), so ``kubectl get nodeset cpu -o yaml`` says which pod, container and image (docs/operator.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

CONDITION: Final = "PodsHealthy"
IMAGE_REASONS: Final = frozenset(
    {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull", "RegistryUnavailable"}
)
START_REASONS: Final = frozenset(
    {"CrashLoopBackOff", "CreateContainerConfigError", "CreateContainerError", "RunContainerError"}
)
HEALTHY_MESSAGE: Final = "no container of its pods is failing to pull its image or to start"


def problems(pods: Iterable[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """(kind, text) for each container waiting for a reason of :data:`IMAGE_REASONS` (kind ``image``) or
    :data:`START_REASONS` (kind ``start``), in pod then container order; terminating pods are skipped."""
    out: list[tuple[str, str]] = []
    for pod in sorted(pods, key=lambda p: str((p.get("metadata") or {}).get("name"))):
        meta = pod.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            continue
        status = pod.get("status") or {}
        images = {c.get("name"): c.get("image") for c in (pod.get("spec") or {}).get("containers") or []}
        images.update({c.get("name"): c.get("image") for c in (pod.get("spec") or {}).get("initContainers") or []})
        for container in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
            waiting = (container.get("state") or {}).get("waiting") or {}
            reason = str(waiting.get("reason") or "")
            kind = "image" if reason in IMAGE_REASONS else "start" if reason in START_REASONS else ""
            if not kind:
                continue
            name = container.get("name")
            image = container.get("image") or images.get(name) or ""
            detail = str(waiting.get("message") or "").strip()
            text = f"pod {meta.get('name')}: container {name} (image {image}): {reason}"
            out.append((kind, f"{text}: {detail}" if detail else text))
    return out


def condition(pods: Iterable[Mapping[str, Any]]) -> tuple[str, str, str, str]:
    """(type, status, reason, message): False ``ImagePullFailed`` when an image cannot be pulled (the registry
    lacks it, or cannot be reached), else False ``ContainersFailing``, else True ``Healthy``."""
    found = problems(pods)
    if not found:
        return (CONDITION, "True", "Healthy", HEALTHY_MESSAGE)
    reason = "ImagePullFailed" if any(kind == "image" for kind, _ in found) else "ContainersFailing"
    return (CONDITION, "False", reason, "; ".join(text for _, text in found))
