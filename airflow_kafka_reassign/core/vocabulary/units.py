"""Byte sizes: one way to read them and one way to print them, both through pydantic's ``ByteSize``.

Reading (:func:`parse_bytes`): an int (bytes), or a number with a unit as ``ByteSize`` reads it:
``K``/``KB``, ``M``/``MB``, ``G``/``GB``, ``T``/``TB``, ``P``/``PB`` are powers of 1000 and
``KiB``, ``MiB``, ``GiB``, ``TiB``, ``PiB`` powers of 1024 (``Ki``, ``Mi``, ... too); ``B`` is
optional and the case does not matter: ``"20GiB"``, ``"500 GB"``, ``"20G"``, ``"1.5TB"``.

Printing (:func:`format_bytes`): decimal units (powers of 1000, as Kafka's own byte configs and
throttles count) with ``ByteSize``'s names, one decimal: ``999 B``, ``1.5 KB``, ``20.0 MB``,
``3.2 GB``. Every size the provider shows (logs, errors, the plan report, the progress line)
is printed by it.
"""

from __future__ import annotations

import math

from pydantic import ByteSize, TypeAdapter, ValidationError

_BYTE_SIZE = TypeAdapter(ByteSize)
#: Binary units written without their B ("20Gi"): ByteSize reads them with it.
_BARE_BINARY = {"ki", "mi", "gi", "ti", "pi", "ei"}


def parse_bytes(value: object, what: str = "size") -> int:
    """``"2TiB"`` -> 2199023255552, ``"500 GB"`` -> 500000000000; an int or float passes through
    (bytes); a leading ``-`` and a trailing ``/s`` (a rate) are read around the size.

    ``ValueError`` naming ``what`` for anything else (a bool, an unknown unit, trailing text).
    """
    fix = ("write bytes (e.g. 2000000000) or a number with a unit "
           "(K, M, G, T as powers of 1000; KiB, MiB, GiB, TiB as powers of 1024)")
    if isinstance(value, bool):
        raise ValueError(f"{what}: {value!r} is not a size; {fix}")
    if isinstance(value, int | float) and math.isfinite(value):
        return int(value)
    if isinstance(value, str):
        text = value.strip().removesuffix("/s").strip()
        sign = -1 if text.startswith("-") else 1
        text = text.removeprefix("-").strip()
        try:
            number = float(text)  # bytes without a unit, exponent allowed ("2e9")
        except ValueError:
            number = None
        if number is not None and math.isfinite(number):
            return sign * int(number)
        match = ByteSize.byte_string_re.fullmatch(text)
        if match:
            unit = match.group(2) or ""
            if unit.lower() in _BARE_BINARY:
                text += "B"
            try:
                return sign * int(_BYTE_SIZE.validate_python(text))
            except ValidationError:
                pass
    raise ValueError(f"{what}: {value!r} is not a size; {fix}")


def format_bytes(n: float) -> str:
    """``n`` bytes in decimal units, one decimal: ``999 B``, ``1.5 KB``, ``20.0 MB``, ``3.2 GB``."""
    if not math.isfinite(n):
        return f"{n} B"
    return ByteSize(round(n)).human_readable(decimal=True, separator=" ")


def byte_unit(n: float) -> tuple[int, str]:
    """The unit :func:`format_bytes` prints ``n`` in, with its size in bytes: ``(1000000, "MB")``
    (a chart's axis scale)."""
    unit = format_bytes(n).rsplit(" ", 1)[1]
    return int(ByteSize.byte_sizes[unit.lower()]), unit
