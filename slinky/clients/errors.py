"""Typed errors raised by slinky's clients.

Callers branch on these types and on their fields (``error_number``, ``status_code``), never on message
text. The tree::

    SlinkyError
    ├── ConfigError                 a setting is missing or out of range
    ├── TranslationError            a Kubernetes object cannot be expressed as a Slurm job (left for others)
    ├── SlurmError                  anything slurmrestd answered or failed to answer
    │   ├── SlurmUnavailable        connect failure, timeout, 429/5xx, controller down (carries retry_after)
    │   ├── SlurmNotFound           the job/node/partition does not exist (404, 2017, 2018, 200+error on GET)
    │   ├── SlurmRejected           Slurm refused a well-formed request (4xx; error_number, error, ...)
    │   │   ├── SlurmConflict       the object is busy or already exists (409, 2016, 2168)
    │   │   └── SlurmInvalidRequest the request itself is malformed (400, REST/data-parser errors 9000-9999)
    │   └── SlurmUnsupported        the chosen API version lacks the feature; raised before sending
    └── KubeError                   anything the Kubernetes API server answered or failed to answer
        ├── KubeUnavailable         connect failure, timeout, 429/5xx (carries retry_after)
        ├── KubeNotFound            404
        └── KubeRejected            other 4xx
            └── KubeConflict        409 (resourceVersion conflict or already exists)

Every message is built from the HTTP method, the path, the status and Slurm's own error entries. A token
never appears in a path, and the Slurm client redacts the current token from any text it copies into an
error, so ``str(exc)`` and ``repr(exc)`` are safe to log.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "ConfigError",
    "KubeConflict",
    "KubeError",
    "KubeNotFound",
    "KubeRejected",
    "KubeUnavailable",
    "SlinkyError",
    "SlurmConflict",
    "SlurmError",
    "SlurmErrorEntry",
    "SlurmInvalidRequest",
    "SlurmNotFound",
    "SlurmRejected",
    "SlurmUnavailable",
    "SlurmUnsupported",
    "TranslationError",
]


class SlinkyError(Exception):
    """Base class of every error slinky raises on purpose."""


class ConfigError(SlinkyError):
    """A setting is missing, inconsistent or out of range."""


class TranslationError(SlinkyError):
    """A Kubernetes object cannot be expressed as a Slurm job. Subclassed by the translators."""


@dataclass(frozen=True)
class SlurmErrorEntry:
    """One entry of slurmrestd's ``errors`` list.

    Attributes:
        error_number: Slurm's error code (``slurm_errno``), e.g. 2014, 2016, 2017; -1 when unspecified.
        error: Slurm's text for the code, e.g. "Requested nodes are busy".
        description: What slurmrestd was doing, e.g. "Failure to delete node k8s-node-10".
        source: The Slurm function that reported it, e.g. "op_handler_node".
    """

    error_number: int | None = None
    error: str = ""
    description: str = ""
    source: str = ""


class SlurmError(SlinkyError):
    """Base class of errors about slurmrestd.

    Attributes:
        method: HTTP method of the failed request, e.g. "POST".
        path: Request path without the query, e.g. "/slurm/v0.0.44/job/submit".
        status_code: HTTP status, or None when no response came back.
        errors: Every error entry slurmrestd returned, first one first.
    """

    def __init__(
        self,
        message: str,
        *,
        method: str = "",
        path: str = "",
        status_code: int | None = None,
        errors: Sequence[SlurmErrorEntry] = (),
    ) -> None:
        super().__init__(message)
        self.message = message
        self.method = method
        self.path = path
        self.status_code = status_code
        self.errors: tuple[SlurmErrorEntry, ...] = tuple(errors)

    @property
    def error_number(self) -> int | None:
        """Slurm's error code of the first error entry, if any."""
        return self.errors[0].error_number if self.errors else None

    @property
    def error(self) -> str:
        """Slurm's error text of the first entry ("" if none)."""
        return self.errors[0].error if self.errors else ""

    @property
    def description(self) -> str:
        """Slurm's description of the first entry ("" if none)."""
        return self.errors[0].description if self.errors else ""

    @property
    def source(self) -> str:
        """The Slurm function that reported the first entry ("" if none)."""
        return self.errors[0].source if self.errors else ""

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.message!r}, status_code={self.status_code!r}, "
            f"error_number={self.error_number!r})"
        )


class SlurmUnavailable(SlurmError):
    """slurmrestd or slurmctld cannot serve the request now; retrying later may work.

    Attributes:
        retry_after: Seconds the server asked us to wait (``Retry-After``), or None.
        outcome_unknown: True when a non-idempotent request (submit, update, create) may have been applied
            before the failure, e.g. a read timeout after the body was sent. Such a request is never
            retried automatically; the caller must look before it retries.
    """

    def __init__(
        self,
        message: str,
        *,
        retry_after: float | None = None,
        outcome_unknown: bool = False,
        method: str = "",
        path: str = "",
        status_code: int | None = None,
        errors: Sequence[SlurmErrorEntry] = (),
    ) -> None:
        super().__init__(message, method=method, path=path, status_code=status_code, errors=errors)
        self.retry_after = retry_after
        self.outcome_unknown = outcome_unknown


class SlurmNotFound(SlurmError):
    """The job, node, partition or reservation does not exist."""


class SlurmRejected(SlurmError):
    """Slurm understood the request and refused it (bad partition, too many CPUs, invalid state...)."""


class SlurmConflict(SlurmRejected):
    """The object is busy (2016 "Requested nodes are busy") or already exists (2168)."""


class SlurmInvalidRequest(SlurmRejected):
    """The request is malformed: slurmrestd could not parse it or a required field is missing."""


class SlurmUnsupported(SlurmError):
    """The chosen API version lacks a feature; raised before anything is sent.

    Attributes:
        feature: The feature's name, e.g. "EXTERNAL_JOB" or "new/node".
        api_version: The version in use, e.g. "v0.0.42".
        minimum_version: The oldest version that has the feature.
    """

    def __init__(self, feature: str, api_version: str, minimum_version: str) -> None:
        super().__init__(f"{feature} needs slurmrestd API {minimum_version} or later; this client uses {api_version}")
        self.feature = feature
        self.api_version = api_version
        self.minimum_version = minimum_version


class KubeError(SlinkyError):
    """Base class of errors about the Kubernetes API server.

    Attributes:
        status_code: HTTP status, or None when no response came back.
        reason: The Status ``reason`` (e.g. "NotFound", "Conflict"), or "".
        causes: The ``reason`` of each of the Status' ``details.causes`` (e.g. "NamespaceTerminating").
    """

    def __init__(
        self, message: str, *, status_code: int | None = None, reason: str = "", causes: tuple[str, ...] = ()
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.reason = reason
        self.causes = causes


class KubeUnavailable(KubeError):
    """The API server cannot serve the request now (connect failure, timeout, 429, 5xx).

    Attributes:
        retry_after: Seconds the server asked us to wait, or None.
    """

    def __init__(
        self,
        message: str,
        *,
        retry_after: float | None = None,
        status_code: int | None = None,
        reason: str = "",
    ) -> None:
        super().__init__(message, status_code=status_code, reason=reason)
        self.retry_after = retry_after


class KubeNotFound(KubeError):
    """The object does not exist (404)."""


class KubeRejected(KubeError):
    """The API server refused the request (4xx other than 404)."""


class KubeConflict(KubeRejected):
    """A resourceVersion conflict or an object that already exists (409)."""
