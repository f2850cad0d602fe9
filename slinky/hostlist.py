"""Slurm hostlist expressions: ``slinky-node-[1-3,7]`` <-> ``[slinky-node-1, slinky-node-2, ...]``.

Pure. Slurm reports a job's nodes as one expression; the bridge binds one pod per expanded name.
"""

from __future__ import annotations

import re

_BRACKET = re.compile(r"^(?P<prefix>[^\[\]]*)\[(?P<ranges>[^\[\]]+)\](?P<suffix>.*)$")


def _split_top(expr: str) -> list[str]:
    """Split on commas that are not inside brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(expr):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(expr[start:i])
            start = i + 1
    parts.append(expr[start:])
    return [p for p in (s.strip() for s in parts) if p]


def expand(expr: str) -> list[str]:
    """Expand a hostlist expression; an empty string gives an empty list.

    Raises:
        ValueError: A malformed range such as ``n[3-1]`` or ``n[a-b]``.
    """
    names: list[str] = []
    for part in _split_top(expr):
        match = _BRACKET.match(part)
        if match is None:
            names.append(part)
            continue
        prefix, suffix = match["prefix"], match["suffix"]
        for item in match["ranges"].split(","):
            lo, _, hi = item.partition("-")
            if not lo.isdigit() or (hi and not hi.isdigit()):
                raise ValueError(f"malformed hostlist range {item!r} in {expr!r}")
            width = len(lo) if lo.startswith("0") else 0
            end = int(hi) if hi else int(lo)
            if end < int(lo):
                raise ValueError(f"descending hostlist range {item!r} in {expr!r}")
            tails = expand(suffix) if "[" in suffix else [suffix]
            for n in range(int(lo), end + 1):
                names.extend(f"{prefix}{n:0{width}d}{tail}" for tail in tails)
    return names


def compress(names: list[str]) -> str:
    """Compress names into a hostlist expression (numeric suffixes only; order of first sight kept)."""
    groups: dict[str, list[int]] = {}
    plain: list[str] = []
    for name in names:
        match = re.match(r"^(.*?)(\d+)$", name)
        if match is None or (match.group(2).startswith("0") and len(match.group(2)) > 1):
            plain.append(name)
            continue
        groups.setdefault(match.group(1), []).append(int(match.group(2)))
    out: list[str] = list(plain)
    for prefix, numbers in groups.items():
        numbers = sorted(set(numbers))
        if len(numbers) == 1:
            out.append(f"{prefix}{numbers[0]}")
            continue
        ranges: list[str] = []
        start = prev = numbers[0]
        for n in [*numbers[1:], None]:
            if n is not None and n == prev + 1:
                prev = n
                continue
            ranges.append(f"{start}" if start == prev else f"{start}-{prev}")
            if n is not None:
                start = prev = n
        out.append(f"{prefix}[{','.join(ranges)}]")
    return ",".join(out)
