"""The Kubernetes client's error mapping: one typed error per answer class, Retry-After kept."""

from __future__ import annotations

import httpx
import pytest

from slinky.clients.errors import KubeConflict, KubeError, KubeNotFound, KubeRejected, KubeUnavailable
from slinky.clients.kube import KubeGone, raise_for_status


@pytest.mark.parametrize(
    ("code", "headers", "cls", "retry_after"),
    [
        (404, {}, KubeNotFound, None),
        (409, {}, KubeConflict, None),
        (410, {}, KubeGone, None),
        (422, {}, KubeRejected, None),
        (429, {"Retry-After": "3"}, KubeUnavailable, 3.0),
        (503, {"Retry-After": "soon"}, KubeUnavailable, None),
        (500, {}, KubeUnavailable, None),
    ],
)
def test_answers_map_to_typed_errors(
    code: int, headers: dict[str, str], cls: type[KubeError], retry_after: float | None
) -> None:
    status = {"kind": "Status", "reason": "Why", "message": "because"}
    with pytest.raises(cls) as caught:
        raise_for_status(httpx.Response(code, headers=headers, json=status), "PATCH", "/api/v1/x")
    assert caught.value.status_code == code and caught.value.reason == "Why"
    assert f"PATCH /api/v1/x: HTTP {code} Why: because" in str(caught.value)
    if isinstance(caught.value, KubeUnavailable):
        assert caught.value.retry_after == retry_after


def test_success_raises_nothing() -> None:
    raise_for_status(httpx.Response(201, json={}), "POST", "/api/v1/x")
