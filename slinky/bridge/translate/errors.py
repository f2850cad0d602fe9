"""Why a workload cannot be expressed as a Slurm job.

These are permanent: retrying does not help until the user changes the object. The caller turns
one into a pod Event and a ``PodScheduled=False`` condition whose message is ``str(error)``, and at
the activity boundary into a non-retryable ``ApplicationError`` whose ``type`` is the class name.

Tree::

    TranslationError (ValueError)      annotation: the key at fault, or None; reason: why
    ├── InvalidQuantity                a Kubernetes quantity that does not parse
    ├── InvalidAnnotation              a slurmjob.slinky.slurm.net/* value that is not valid
    ├── UnknownAnnotation              a key under the prefix that does not exist
    ├── ConflictingAnnotations         values that are valid alone but not together
    └── InvalidPodSpec                 pod resources that cannot be expressed (field names the path)
"""

from __future__ import annotations


class TranslationError(ValueError):
    """A workload that cannot be translated to a Slurm job.

    Attributes:
        annotation: The annotation key at fault, or None when the fault is elsewhere in the object.
        reason: A short, user-facing explanation.
        field: The offending path inside the pod spec, when it is not an annotation.
    """

    def __init__(self, reason: str, *, annotation: str | None = None, field: str | None = None) -> None:
        self.annotation = annotation
        self.reason = reason
        self.field = field
        super().__init__(self._message())

    def _message(self) -> str:
        if self.annotation is not None:
            return f"annotation {self.annotation}: {self.reason}"
        if self.field is not None:
            return f"{self.field}: {self.reason}"
        return self.reason

    def __reduce__(self) -> tuple[object, ...]:
        # Keep keyword-only attributes across pickling (process pools, test runners).
        return (_rebuild, (type(self), self.reason, self.annotation, self.field))


def _rebuild(cls: type[TranslationError], reason: str, annotation: str | None, field: str | None) -> TranslationError:
    return cls(reason, annotation=annotation, field=field)


class InvalidQuantity(TranslationError):
    """A Kubernetes resource quantity (``"500m"``, ``"1Gi"``) that does not parse."""


class InvalidAnnotation(TranslationError):
    """An annotation value of the wrong type or out of range."""


class UnknownAnnotation(TranslationError):
    """A key under ``slurmjob.slinky.slurm.net/`` that the bridge does not know (a typo)."""


class ConflictingAnnotations(TranslationError):
    """Annotations that are valid one by one but contradict each other (``min-nodes > max-nodes``)."""


class InvalidPodSpec(TranslationError):
    """Pod resources the bridge cannot express as a Slurm job."""
