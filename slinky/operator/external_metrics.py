"""The external metrics API's answers (``external.metrics.k8s.io/v1beta1``), as pure functions: label
selectors as Kubernetes parses them, quantities as it prints them, and the discovery and value lists that the
HorizontalPodAutoscaler controller reads (docs/autoscaling.md).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from slinky.operator.slurm_metrics import Family

GROUP = "external.metrics.k8s.io"
VERSION = "v1beta1"
GROUP_VERSION = f"{GROUP}/{VERSION}"

_REQUIREMENT = re.compile(
    r"^\s*(?P<neg>!)?\s*(?P<key>[A-Za-z0-9_./-]+)\s*"
    r"(?:(?P<op>==|=|!=)\s*(?P<value>[A-Za-z0-9_.-]*)|\s+(?P<set>in|notin)\s*\((?P<values>[^)]*)\))?\s*$"
)


class SelectorError(ValueError):
    """A label selector that does not parse (the API answers 400 with it)."""


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!"
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key, "")
        if self.op == "exists":
            return present
        if self.op == "!":
            return not present
        if self.op in ("=", "in"):
            return present and value in self.values
        return not present or value not in self.values  # "!=" and "notin"


def _split(selector: str) -> list[str]:
    """Split on the commas outside parentheses."""
    parts, depth, current = [], 0, ""
    for char in selector:
        depth += char == "("
        depth -= char == ")"
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return [p for p in parts if p.strip()]


def parse_selector(selector: str) -> list[Requirement]:
    """A label selector (``a=b,c!=d,e in (x,y),!f,g``) as its requirements; empty selects everything.

    Raises:
        SelectorError: A requirement does not parse.
    """
    out = []
    for part in _split(selector or ""):
        match = _REQUIREMENT.match(part)
        if match is None:
            raise SelectorError(f"unable to parse requirement: {part.strip()!r}")
        key = match["key"]
        if match["neg"]:
            if match["op"] or match["set"]:
                raise SelectorError(f"unable to parse requirement: {part.strip()!r}")
            out.append(Requirement(key, "!"))
        elif match["op"]:
            out.append(Requirement(key, "!=" if match["op"] == "!=" else "=", frozenset({match["value"]})))
        elif match["set"]:
            values = frozenset(v.strip() for v in match["values"].split(",") if v.strip())
            out.append(Requirement(key, match["set"], values))
        else:
            out.append(Requirement(key, "exists"))
    return out


def quantity(value: float) -> str:
    """A resource.Quantity as Kubernetes prints one: an integer plainly, else in milli-units (rounded)."""
    if float(value).is_integer():
        return str(int(value))
    return f"{round(value * 1000)}m"


def resource_list(names: Iterable[str]) -> dict[str, object]:
    """Discovery of the group version: each metric is a namespaced resource of verb get."""
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": GROUP_VERSION,
        "resources": [
            {"name": name, "singularName": "", "namespaced": True, "kind": "ExternalMetricValueList", "verbs": ["get"]}
            for name in sorted(set(names))
        ],
    }


def value_list(
    families: Iterable[Family], metric: str, namespace: str, selector: str, timestamp: str
) -> dict[str, object]:
    """The ``ExternalMetricValueList`` of one metric in one namespace: a value per sample whose labels the
    selector matches (the HPA sums them). Samples of other namespaces are never shown.

    Raises:
        SelectorError: The selector does not parse.
    """
    requirements = parse_selector(selector)
    items = [
        {"metricName": metric, "metricLabels": labels, "timestamp": timestamp, "value": quantity(value)}
        for family in families
        if family.name == metric
        for labels, value in family.samples
        if labels.get("namespace") == namespace and all(r.matches(labels) for r in requirements)
    ]
    return {"kind": "ExternalMetricValueList", "apiVersion": GROUP_VERSION, "metadata": {}, "items": items}
