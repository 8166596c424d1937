"""The acceptance slices (tests/integration/acceptance.py): every entry names a test that exists (a renamed test would
otherwise fall silently out of its slice into ``make test``, or an entry would select nothing), no test is in two
slices, and the slice follows the commit hash."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
INTEGRATION = ROOT / "tests" / "integration"
spec = importlib.util.spec_from_file_location("integration_acceptance", INTEGRATION / "acceptance.py")
assert spec is not None and spec.loader is not None
acceptance = importlib.util.module_from_spec(spec)
spec.loader.exec_module(acceptance)


def _test_names(file_name: str) -> set[str]:
    tree = ast.parse((INTEGRATION / file_name).read_text())
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")}


@pytest.mark.parametrize("entry", [e for s in acceptance.SLICES for e in s] + list(acceptance.ONLY_BY_HAND))
def test_every_entry_names_a_file_and_test_that_exist(entry):
    file_name, _, test_name = entry.partition("::")
    assert (INTEGRATION / file_name).is_file(), f"{entry}: no such file in tests/integration"
    if test_name:
        assert test_name in _test_names(file_name), f"{entry}: no such test in {file_name}"


def test_no_test_is_in_two_slices_and_a_whole_file_is_not_also_named_by_its_tests():
    seen: dict[str, int] = {}
    for index, entries in enumerate(acceptance.SLICES):
        for entry in entries:
            file_name, _, test_name = entry.partition("::")
            for name in ([test_name] if test_name else sorted(_test_names(file_name))):
                key = f"{file_name}::{name}"
                assert key not in seen, f"{key} in slices {seen[key]} and {index}"
                seen[key] = index
    assert not {e.partition("::")[0] for e in seen} & set(acceptance.ONLY_BY_HAND)


def test_make_test_keeps_none_all_keeps_every_one_a_number_keeps_its_slice():
    kept, every = acceptance.entries(None)
    assert not kept and set(acceptance.SLICES[0]) <= every and set(acceptance.ONLY_BY_HAND) <= every
    assert acceptance.entries("all")[0] == every
    assert acceptance.entries("1")[0] == set(acceptance.SLICES[1])
    with pytest.raises(ValueError, match="slices"):
        acceptance.entries(str(len(acceptance.SLICES)))


def test_the_slice_is_the_first_8_hex_digits_of_the_commit_modulo_the_slices():
    n = len(acceptance.SLICES)
    assert [acceptance.slice_of(f"{i:08x}" + "f" * 32) for i in range(2 * n)] == list(range(n)) * 2


def test_an_entry_names_a_whole_file_or_one_test_of_it():
    assert acceptance.matches("test_a.py", "test_a.py", "test_x")
    assert acceptance.matches("test_a.py::test_x", "test_a.py", "test_x")
    assert not acceptance.matches("test_a.py::test_x", "test_a.py", "test_y")
    assert not acceptance.matches("test_a.py", "test_b.py", "test_x")
