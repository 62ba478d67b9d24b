"""How long after its Go a step starts (``master.run.startlead.start_lead_ns``), on a table of
cases; a real run's leads are checked in test_run_quickstart."""

from __future__ import annotations

import pytest

from master.run.startlead import GoConfirmed, start_lead_ns

MS = 1_000_000


@pytest.mark.parametrize(("rtt_ms", "workloads", "confirmed", "gather_ms", "want_ms"), [
    # nothing confirmed yet (a run's first step): 250 ms for a small Go, else 1 s
    (0.1, 1, None, 0, 250),
    (0.1, 500, None, 0, 250),
    (0.1, 501, None, 0, 1000),
    # four times the run's longest confirmation, at least 250 ms
    (0.1, 1, GoConfirmed(1, 3 * MS), 0, 250),
    (0.1, 4, GoConfirmed(8, 3 * MS), 0, 250),
    (0.1, 8, GoConfirmed(8, 100 * MS), 0, 400),
    (0.1, 8, GoConfirmed(8, 400 * MS), 0, 1600),
    (0.1, 2000, GoConfirmed(2000, 40 * MS), 0, 250),
    # a big Go of more workloads than any confirmed one: 1 s, or more as confirmations say
    (0.1, 2001, GoConfirmed(2000, 40 * MS), 0, 1000),
    (0.1, 2001, GoConfirmed(2000, 400 * MS), 0, 1600),
    # never less than 20 round trips to the farthest host
    (40, 1, GoConfirmed(1, 3 * MS), 0, 800),
    (80, 1, None, 0, 1600),
    # nor than a gather's lead for its counters' base
    (0.1, 1, GoConfirmed(1, 3 * MS), 300, 300),
    (0.1, 1000, None, 1500, 1500),
])
def test_start_lead(rtt_ms: float, workloads: int, confirmed: GoConfirmed | None,
                    gather_ms: float, want_ms: float) -> None:
    got = start_lead_ns(round(rtt_ms * MS), workloads, confirmed, round(gather_ms * MS))
    assert got == round(want_ms * MS)
