"""Whether a name is one of a test's rollup types, and what is said when it is not.

Owns the one check and its wording, for every place a user names a rollup type of the test: a
step's ``measure.focus_rollup`` and ``dfc.focus_rollup``, an ``edit_rollup`` instance
(``host=h1``), ``metrics: rollups:`` and ``--metrics-rollups``, a threshold's ``rollup:`` and
``ivypy run --live-rollup``. Each caller wraps the text in its own error, naming its key path,
file and line. Pure: it does not parse a rollup type's syntax (``master.config.loader`` does),
raise, or know which instances a run has.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence

__all__ = ["rollup_type_problem"]


def rollup_type_problem(name: str, test_types: Sequence[str]) -> str | None:
    """None when ``name`` is one of ``test_types`` (the test's rollup types, in order);
    otherwise why not, naming it, the closest spelling if one is close, and the test's types:
    ``unknown rollup type 'hots': did you mean 'host'? (the test's: all, host, lun)``."""
    if name in test_types:
        return None
    close = difflib.get_close_matches(name, list(test_types), n=1, cutoff=0.6)
    hint = f": did you mean {close[0]!r}?" if close else ""
    return f"unknown rollup type {name!r}{hint} (the test's: {', '.join(test_types)})"
