"""Checks the chart tests share: every rendered object against the Kubernetes 1.20 OpenAPI schemas."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest

KUBE_VERSION = "1.20.0"


def assert_valid_for_1_20(docs: list[dict[str, Any]]) -> None:
    """kubernetes-validate, strict: an unknown field, a wrong type or a kind 1.20 does not serve fails the test."""
    assert docs
    for doc in docs:
        ident = f"{doc['kind']}/{doc['metadata']['name']}"
        try:
            kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)
        except kubernetes_validate.SchemaNotFoundError as err:  # a WARN on the CLI: fail here
            pytest.fail(f"{ident}: no Kubernetes {KUBE_VERSION} schema: {err}")
        except kubernetes_validate.ValidationError as err:
            pytest.fail(f"{ident}: {err.message} at {'.'.join(map(str, err.path))}")
