"""slurmrestd API versions and the features each one has.

slurmrestd 26.05 serves data parsers v0.0.42-v0.0.45 side by side. slinky defaults to v0.0.44, the
version upstream's bridge and operator use. Features a chosen version lacks are refused by
:func:`require` with :class:`~slinky.clients.errors.SlurmUnsupported` before any request is sent, because
the server's own answers are unhelpful: v0.0.42 answers a submit with ``EXTERNAL_JOB`` with HTTP 500
"Data parser unable to parse invalid flag", and v0.0.43 answers ``new/node`` with a bare 404.
"""

from __future__ import annotations

import enum

from slinky.clients.errors import ConfigError, SlurmUnsupported

__all__ = [
    "DEFAULT_API_VERSION",
    "MINIMUM_VERSION",
    "SUPPORTED_API_VERSIONS",
    "Feature",
    "has",
    "require",
    "validate_version",
]

SUPPORTED_API_VERSIONS: tuple[str, ...] = ("v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45")
DEFAULT_API_VERSION = "v0.0.44"


class Feature(enum.Enum):
    """A feature whose availability depends on the API version; see :data:`MINIMUM_VERSION`."""

    EXTERNAL_JOB = "EXTERNAL_JOB"
    EXTERNAL_NODE_STATE = "EXTERNAL node state"
    NEW_NODE = "new/node"
    JOB_RESOURCES = "resources/{job_id}"
    REQUEUE = "job/{job_id}/requeue"


MINIMUM_VERSION: dict[Feature, str] = {
    # The job flag enum gains EXTERNAL_JOB in v0.0.43 (measured: v0.0.42 answers 500, v0.0.43 runs it).
    Feature.EXTERNAL_JOB: "v0.0.43",
    # The EXTERNAL node state is reported from v0.0.44 (v0.0.43 shows IDLE+DYNAMIC_NORM).
    Feature.EXTERNAL_NODE_STATE: "v0.0.44",
    # POST new/node: v0.0.43 answers a bare 404.
    Feature.NEW_NODE: "v0.0.44",
    Feature.JOB_RESOURCES: "v0.0.44",
    Feature.REQUEUE: "v0.0.45",
}


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.lstrip("v").split("."))


def validate_version(version: str) -> str:
    """Check that a version string is one slinky supports.

    Args:
        version: e.g. "v0.0.44".

    Returns:
        The version, unchanged.

    Raises:
        ConfigError: The version is not one of :data:`SUPPORTED_API_VERSIONS`.
    """
    if version not in SUPPORTED_API_VERSIONS:
        raise ConfigError(
            f"slurmrestd API version {version!r} is not supported; choose one of " + ", ".join(SUPPORTED_API_VERSIONS)
        )
    return version


def has(version: str, feature: Feature) -> bool:
    """Tell whether an API version has a feature."""
    return _key(version) >= _key(MINIMUM_VERSION[feature])


def require(version: str, feature: Feature) -> None:
    """Raise unless an API version has a feature.

    Raises:
        SlurmUnsupported: ``version`` is older than the feature.
    """
    if not has(version, feature):
        raise SlurmUnsupported(feature.value, version, MINIMUM_VERSION[feature])
