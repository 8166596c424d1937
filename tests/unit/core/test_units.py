"""core.vocabulary.units: byte sizes read and printed one way (pydantic's ByteSize), decimal units on display."""

from __future__ import annotations

import pytest

from airflow_kafka_reassign.core.vocabulary.units import byte_unit, format_bytes, parse_bytes

GiB = 2**30


@pytest.mark.parametrize(("n", "text"), [
    (0, "0 B"), (999, "999 B"), (1500, "1.5 KB"), (20_000_000, "20.0 MB"), (3.2e9, "3.2 GB"), (4e12, "4.0 TB"),
    (-1500, "-1.5 KB"), (150_000.4, "150.0 KB"),
])
def test_sizes_print_in_decimal_units(n, text):
    assert format_bytes(n) == text


@pytest.mark.parametrize(("n", "unit"), [(1, (1, "B")), (999, (1, "B")), (16e6, (10**6, "MB")), (2.5e12, (10**12, "TB"))])
def test_a_charts_unit_is_the_one_the_sizes_print_in(n, unit):
    assert byte_unit(n) == unit


@pytest.mark.parametrize(("value", "parsed"), [
    (2**40, 2**40), (1.5e9, 1_500_000_000), ("2000", 2000), ("2e9", 2_000_000_000),
    ("20GiB", 20 * GiB), ("20 gib", 20 * GiB), ("20Gi", 20 * GiB), ("500 GB", 500 * 10**9), ("20G", 20 * 10**9),
    ("1.5TB", 1_500_000_000_000), ("100MiB/s", 100 * 2**20), ("-5GB", -5 * 10**9), (" 32MB ", 32_000_000),
])
def test_sizes_are_read_with_either_unit_system(value, parsed):
    assert parse_bytes(value) == parsed


@pytest.mark.parametrize("value", [True, None, "", "GB", "20 parsecs", "20GiB of disk", "inf", "nan", float("inf"), [1]])
def test_anything_else_is_refused_naming_the_parameter(value):
    with pytest.raises(ValueError, match=r"^disk: .* is not a size; write bytes .*GiB"):
        parse_bytes(value, "disk")
