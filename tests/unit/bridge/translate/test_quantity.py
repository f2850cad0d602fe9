from __future__ import annotations

from decimal import Decimal

import pytest

from slinky.bridge.translate.errors import InvalidQuantity, TranslationError
from slinky.bridge.translate.quantity import cpu_cores, memory_mib, parse_quantity


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("2", Decimal(2)),
        ("500m", Decimal("0.5")),
        ("1.5", Decimal("1.5")),
        ("100k", Decimal(100_000)),
        ("1Ki", Decimal(1024)),
        ("1Gi", Decimal(2**30)),
        ("1G", Decimal(10**9)),
        ("1e3", Decimal(1000)),
        ("1E-3", Decimal("0.001")),
        ("250u", Decimal("0.00025")),
        (".5", Decimal("0.5")),
        ("+3", Decimal(3)),
        (4, Decimal(4)),
    ],
    ids=[
        "plain integer",
        "millicores",
        "decimal fraction",
        "decimal kilo",
        "binary kibi",
        "binary gibi",
        "decimal giga is not gibi",
        "decimal exponent",
        "negative exponent",
        "micro",
        "leading dot",
        "explicit plus sign",
        "hand-written int",
    ],
)
def test_parse_quantity_exact_value(text: str | int, want: Decimal) -> None:
    assert parse_quantity(text) == want


@pytest.mark.parametrize(
    "text",
    ["", "abc", "1.2.3", "1Gb", "1 Gi", "Gi", "-1", "1e", "0x10", "1ki", "1e999", True],
    ids=[
        "empty",
        "letters",
        "two dots",
        "unknown suffix",
        "space before suffix",
        "suffix without number",
        "negative",
        "dangling exponent",
        "hex",
        "lower-case binary suffix",
        "absurd exponent",
        "boolean",
    ],
)
def test_parse_quantity_rejects_garbage(text: str) -> None:
    with pytest.raises(InvalidQuantity) as info:
        parse_quantity(text)
    assert isinstance(info.value, TranslationError)
    assert info.value.annotation is None


@pytest.mark.parametrize(
    ("text", "want"),
    [("500m", 1), ("1", 1), ("1001m", 2), ("1.5", 2), ("4", 4), ("0", 0)],
    ids=["half a core rounds up", "one", "just over one", "one and a half", "four", "zero"],
)
def test_cpu_cores_round_up_like_quantity_value(text: str, want: int) -> None:
    assert cpu_cores(text) == want


@pytest.mark.parametrize(
    ("text", "want"),
    [("1Gi", 1024), ("512Mi", 512), ("1G", 954), ("1e3", 1), ("100k", 1), ("1049600", 2), ("0", 0)],
    ids=[
        "gibi",
        "mebi",
        "giga rounds up",
        "a thousand bytes is still one MiB",
        "100 kB rounds up",
        "one byte over a MiB",
        "zero",
    ],
)
def test_memory_mib_rounds_bytes_up(text: str, want: int) -> None:
    assert memory_mib(text) == want
