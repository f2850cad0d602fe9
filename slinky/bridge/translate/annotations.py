"""The ``slurmjob.slinky.slurm.net/*`` workload annotations, parsed and validated.

Every value is checked here, so a typo fails with an error naming its key instead of reaching
Slurm (or being silently ignored, as an unknown key under the prefix would be upstream).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from slinky import wellknown
from slinky.bridge.models import TranslationWarning
from slinky.bridge.translate.errors import InvalidAnnotation, InvalidQuantity, UnknownAnnotation
from slinky.bridge.translate.quantity import ceil_value, memory_mib

INT32_MAX: Final = 2**31 - 1
_INTEGER: Final = re.compile(r"^\+?[0-9]+$")
_GRES_ITEM: Final = re.compile(r"^(?:gres/)?[A-Za-z0-9_.\-]+(?:[:=][A-Za-z0-9_.\-]+)*$")


def _string(key: str, value: str) -> str:
    text = value.strip()
    if not text:
        raise InvalidAnnotation("must not be empty", annotation=key)
    return text


def _integer(minimum: int) -> Callable[[str, str], int]:
    def parse(key: str, value: str) -> int:
        text = value.strip()
        if not _INTEGER.match(text):
            raise InvalidAnnotation(f"{value!r} is not a whole number", annotation=key)
        number = int(text)
        if not minimum <= number <= INT32_MAX:
            raise InvalidAnnotation(f"{number} is outside {minimum}..{INT32_MAX}", annotation=key)
        return number

    return parse


def _cpus(key: str, value: str) -> int:
    try:
        cpus = ceil_value(value)
    except InvalidQuantity as err:
        raise InvalidAnnotation(err.reason, annotation=key) from err
    if not 1 <= cpus <= INT32_MAX:
        raise InvalidAnnotation(f"{value!r} must be at least one CPU", annotation=key)
    return cpus


def _memory(key: str, value: str) -> int:
    try:
        mib = memory_mib(value)
    except InvalidQuantity as err:
        raise InvalidAnnotation(err.reason, annotation=key) from err
    if mib < 1:
        raise InvalidAnnotation(f"{value!r} must be more than zero (e.g. 4Gi)", annotation=key)
    return mib


def _boolean(key: str, value: str) -> bool:
    text = value.strip().lower()
    if text not in ("true", "false"):
        raise InvalidAnnotation(f'{value!r} must be "true" or "false"', annotation=key)
    return text == "true"


def _gres(key: str, value: str) -> str:
    items = [item.strip() for item in value.split(",")]
    if not all(_GRES_ITEM.match(item) for item in items):
        raise InvalidAnnotation(f"{value!r} is not a GRES list such as gpu:2 or gpu:v100:2", annotation=key)
    return ",".join(item if item.startswith("gres/") else f"gres/{item}" for item in items)


_Parser = Callable[[str, str], Any]

FIELDS: Final[dict[str, tuple[str, _Parser]]] = {
    wellknown.ANNOTATION_ACCOUNT: ("account", _string),
    wellknown.ANNOTATION_CONSTRAINTS: ("constraints", _string),
    wellknown.ANNOTATION_CPU_PER_TASK: ("cpus_per_task", _cpus),
    wellknown.ANNOTATION_EXCLUSIVE: ("exclusive", _boolean),
    wellknown.ANNOTATION_GRES: ("tres_per_node", _gres),
    wellknown.ANNOTATION_GROUP_ID: ("group_id", _integer(0)),
    wellknown.ANNOTATION_JOB_NAME: ("name", _string),
    wellknown.ANNOTATION_LICENSES: ("licenses", _string),
    wellknown.ANNOTATION_MAX_NODES: ("max_nodes", _integer(1)),
    wellknown.ANNOTATION_MEM_PER_NODE: ("memory_per_node_mib", _memory),
    wellknown.ANNOTATION_MIN_NODES: ("min_nodes", _integer(1)),
    wellknown.ANNOTATION_PARTITION: ("partition", _string),
    wellknown.ANNOTATION_PRIORITY: ("priority", _integer(0)),
    wellknown.ANNOTATION_QOS: ("qos", _string),
    wellknown.ANNOTATION_RESERVATION: ("reservation", _string),
    wellknown.ANNOTATION_TIMELIMIT: ("time_limit_minutes", _integer(1)),
    wellknown.ANNOTATION_USER_ID: ("user_id", _integer(0)),
    wellknown.ANNOTATION_WCKEY: ("wckey", _string),
}
"""Annotation key → (`SlurmJobSpec` field, parser)."""


@dataclass(frozen=True)
class ParsedAnnotations:
    """Validated overrides, keyed by `SlurmJobSpec` field, and the key each came from."""

    values: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    warnings: tuple[TranslationWarning, ...] = ()


def parse_annotations(annotations: Mapping[str, str] | None) -> ParsedAnnotations:
    """Validate the workload annotations of one object.

    Deprecated aliases (`wellknown.DEPRECATED_ANNOTATION_ALIASES`) are accepted with a warning;
    when the current key is also set, it wins and the alias is reported as ignored.

    Raises:
        UnknownAnnotation: A key under the prefix that is not one of the 18.
        InvalidAnnotation: A value of the wrong type or out of range.
    """
    annotations = annotations or {}
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    warnings: list[TranslationWarning] = []
    for key in sorted(annotations):
        if key.startswith(wellknown.PREFIX_SLURMJOB) and key not in FIELDS:
            raise UnknownAnnotation(_unknown_reason(key), annotation=key)
    for key in sorted(annotations):
        canonical = wellknown.DEPRECATED_ANNOTATION_ALIASES.get(key, key)
        if canonical not in FIELDS:
            continue
        if canonical != key:
            if canonical in annotations:
                warnings.append(
                    TranslationWarning(
                        annotation=key, message=f"{key} is deprecated and ignored because {canonical} is set"
                    )
                )
                continue
            warnings.append(TranslationWarning(annotation=key, message=f"{key} is deprecated; use {canonical}"))
        name, parser = FIELDS[canonical]
        raw = annotations[key]
        if not isinstance(raw, str):
            raise InvalidAnnotation(f"{raw!r} must be a string", annotation=key)
        values[name] = parser(key, raw)
        sources[name] = key
    return ParsedAnnotations(values=values, sources=sources, warnings=tuple(warnings))


def _unknown_reason(key: str) -> str:
    suggestions = difflib.get_close_matches(key, sorted(FIELDS), n=1)
    hint = f"; did you mean {suggestions[0]}?" if suggestions else ""
    return f"not a known {wellknown.PREFIX_SLURMJOB}* annotation{hint}"
