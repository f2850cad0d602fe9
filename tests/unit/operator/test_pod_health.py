"""PodsHealthy: which pod, container and image cannot start, from the kubelet's waiting reasons (pure)."""

from __future__ import annotations

from typing import Any

from slinky.operator import pod_health


def pod(name: str, reason: str | None, message: str = "", *, deleting: bool = False) -> dict[str, Any]:
    state: dict[str, Any] = {"waiting": {"reason": reason, "message": message}} if reason else {"running": {}}
    meta: dict[str, Any] = {"name": name}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-29T00:00:00Z"
    return {
        "metadata": meta,
        "spec": {"containers": [{"name": "slurmd", "image": "ghcr.io/slinkyproject/slurmd:nope"}]},
        "status": {
            "containerStatuses": [{"name": "slurmd", "image": "ghcr.io/slinkyproject/slurmd:nope", "state": state}]
        },
    }


def test_running_and_merely_creating_pods_are_healthy() -> None:
    assert pod_health.condition([pod("cpu-0", None), pod("cpu-1", "ContainerCreating")]) == (
        "PodsHealthy",
        "True",
        "Healthy",
        pod_health.HEALTHY_MESSAGE,
    )


def test_an_image_the_registry_lacks_is_named_with_pod_container_and_the_kubelets_message() -> None:
    type_, status, reason, message = pod_health.condition(
        [pod("cpu-1", "ImagePullBackOff", 'Back-off pulling image "x"'), pod("cpu-0", "ErrImagePull", "not found")]
    )
    assert (type_, status, reason) == ("PodsHealthy", "False", "ImagePullFailed")
    assert message == (
        "pod cpu-0: container slurmd (image ghcr.io/slinkyproject/slurmd:nope): ErrImagePull: not found; "
        "pod cpu-1: container slurmd (image ghcr.io/slinkyproject/slurmd:nope): ImagePullBackOff: "
        'Back-off pulling image "x"'
    )


def test_a_crash_loop_is_containers_failing_and_a_terminating_pod_is_not_counted() -> None:
    found = pod_health.condition(
        [pod("cpu-0", "CrashLoopBackOff", "back-off 10s"), pod("cpu-1", "ErrImagePull", deleting=True)]
    )
    assert found[1:3] == ("False", "ContainersFailing")
    assert "cpu-1" not in found[3] and "CrashLoopBackOff: back-off 10s" in found[3]


def test_init_containers_count_too() -> None:
    p = pod("c-0", None)
    p["status"]["initContainerStatuses"] = [
        {"name": "init", "image": "i:1", "state": {"waiting": {"reason": "InvalidImageName"}}}
    ]
    assert pod_health.condition([p])[3] == "pod c-0: container init (image i:1): InvalidImageName"
