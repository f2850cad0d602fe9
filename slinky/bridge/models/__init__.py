"""Pydantic models shared by workflows, activities and the translator (pure, no I/O)."""

from slinky.bridge.models.jobspec import (
    SlurmJobSpec,
    TranslateDefaults,
    TranslationResult,
    TranslationWarning,
    admin_comment_for,
    pods_from_admin_comment,
)

__all__ = [
    "SlurmJobSpec",
    "TranslateDefaults",
    "TranslationResult",
    "TranslationWarning",
    "admin_comment_for",
    "pods_from_admin_comment",
]
