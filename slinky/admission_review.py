"""The AdmissionReview envelope both admission webhooks speak (the bridge's pods, the operator's six kinds):
what a request must be and how an answer is wrapped. Pure; the rules are each wing's."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

API_VERSIONS: Final = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")


def request_of(admission_review: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]]:
    """(apiVersion, request) of an AdmissionReview the API server sent.

    Raises:
        ValueError: Not an AdmissionReview of :data:`API_VERSIONS` with a request and its uid (the server
            answers 400).
    """
    api_version = admission_review.get("apiVersion")
    if api_version not in API_VERSIONS or admission_review.get("kind") != "AdmissionReview":
        raise ValueError(f"not an AdmissionReview of {' or '.join(API_VERSIONS)}")
    request = admission_review.get("request")
    if not isinstance(request, Mapping) or not request.get("uid"):
        raise ValueError("AdmissionReview without request.uid")
    return str(api_version), request


def wrap(api_version: str, request: Mapping[str, Any], response: Mapping[str, Any]) -> dict[str, Any]:
    """The AdmissionReview answering ``request``: same apiVersion, its uid."""
    return {"apiVersion": api_version, "kind": "AdmissionReview", "response": {"uid": request["uid"], **response}}
