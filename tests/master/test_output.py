"""master.output: CSV cell formatting (``fmt``, ``format_float_rows``)."""

from __future__ import annotations

import numpy as np
import pytest

from master.output import fmt, format_float_rows


@pytest.mark.parametrize(("value", "text"), [
    (123456.0, "123456"),
    (114805.33, "114805"),
    (999999.4, "999999"),
    (999999.5, "1000000"),      # %.6g would write 1e+06
    (1234567.0, "1234567"),     # a cluster's IOPS: every digit, no exponent
    (1234567.6, "1234568"),
    (-25000000.0, "-25000000"),
    (123456789012345.0, "123456789012345"),
    (0.000123, "0.000123"),
    (1.5e-7, "1.5e-07"),        # small values keep %.6g
    (float("nan"), ""),
    (None, ""),
])
def test_fmt_writes_large_numbers_without_exponent(value: float | None, text: str) -> None:
    assert fmt(value) == text


def test_large_values_parse_back_to_their_integer_part() -> None:
    """A row's IOPS of 1,234,567 reads back as 1,234,567 (not 1,234,570), so instance rows
    add up to the ``all`` row exactly."""
    parts = [123456.0 + i for i in range(10)]
    total = sum(parts)
    assert total >= 1e6
    assert float(fmt(total)) == total
    assert sum(float(fmt(p)) for p in parts) == float(fmt(total))


def test_format_float_rows_matches_fmt_for_large_values() -> None:
    vals = np.array([[1234567.0, 0.5, 12.25], [3.0, 999999.5, np.nan], [1.0, 2.0, 3.0],
                     [-7654321.0, 1e-7, 5e14]])
    assert format_float_rows(vals) == [",".join(fmt(float(v)) for v in row) for row in vals]
    assert format_float_rows(vals)[0] == "1234567,0.5,12.25"
