"""Kubernetes resource quantities (``k8s.io/apimachinery/pkg/api/resource``), parsed exactly.

Only what the bridge needs: the numeric value as a `Decimal`, and the two roundings upstream uses,
``Quantity.Value()`` (round up to an integer) for CPUs and bytes rounded up to MiB for memory.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation
from typing import Final

from slinky.bridge.translate.errors import InvalidQuantity

MIB: Final = 1024 * 1024

_SUFFIXES: Final[dict[str, Decimal]] = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}

# The grammar of resource.ParseQuantity: a signed decimal number, then a binary or decimal SI
# suffix or a decimal exponent (e/E followed by a signed integer).
_QUANTITY: Final = re.compile(
    r"^(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?:(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])|[eE](?P<exponent>[+-]?[0-9]+))?$"
)


def parse_quantity(text: str | int | float) -> Decimal:
    """The exact value of a Kubernetes quantity.

    Raises:
        InvalidQuantity: For anything resource.ParseQuantity would reject, and for negative values,
            which no resource request may have.
    """
    if isinstance(text, bool):
        raise InvalidQuantity(f"{text!r} is not a quantity")
    if isinstance(text, int | float):
        # The API server always serialises quantities as strings; numbers come from hand-made dicts.
        text = str(text)
    match = _QUANTITY.match(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise InvalidQuantity(f"{text!r} is not a Kubernetes quantity (e.g. 500m, 2, 1Gi, 512M)")
    try:
        number = Decimal(match["number"])
        if match["exponent"] is not None:
            exponent = int(match["exponent"])
            if abs(exponent) > 64:
                raise InvalidQuantity(f"{text!r} is out of range")
            value = number.scaleb(exponent)
        else:
            value = number * _SUFFIXES[match["suffix"] or ""]
    except InvalidOperation as err:  # pragma: no cover - the regex admits only valid decimals
        raise InvalidQuantity(f"{text!r} is not a Kubernetes quantity") from err
    if value < 0:
        raise InvalidQuantity(f"{text!r} is negative")
    return value


def ceil_value(text: str | int | float) -> int:
    """``Quantity.Value()``: the quantity rounded up to an integer (``"500m"`` → 1, ``"1.5"`` → 2)."""
    return math.ceil(parse_quantity(text))


def cpu_cores(text: str | int | float) -> int:
    """Whole CPUs for a cpu quantity, rounded up as upstream does."""
    return ceil_value(text)


def bytes_to_mib(value: Decimal | int) -> int:
    """Bytes to MiB, rounded up so a job never gets less memory than the pod asked for."""
    return math.ceil(Decimal(value) / MIB)


def memory_mib(text: str | int | float) -> int:
    """MiB for a memory quantity in bytes (``"1Gi"`` → 1024, ``"1G"`` → 954), rounded up."""
    return bytes_to_mib(ceil_value(text))
