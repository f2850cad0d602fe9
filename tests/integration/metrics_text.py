"""Reading one series out of a Prometheus text exposition (the metrics tests of both processes)."""

from __future__ import annotations


def sample(text: str, name: str, default: float | None = None) -> float:
    """The value of one series; ``default`` for a labelled series not created yet (no such event so far)."""
    for line in text.splitlines():
        if line.startswith((name + " ", name + "{")):
            return float(line.rsplit(" ", 1)[1])
    if default is not None:
        return default
    raise AssertionError(f"{name} not exposed")
