"""How long after its Go a step starts: the lead that lets every slave read the Go and pass
the start on to its workers first.

Owns ``start_lead_ns`` and ``GoConfirmed`` (what the run's steps so far say of its hosts
reading a Go) with their constants. Pure: the step loop measures, this decides.
"""

from __future__ import annotations

from dataclasses import dataclass

#: How long before its start a step's Go is sent while nothing says the hosts read one sooner:
#: a step of more workloads than ``SMALL_GO_WORKLOADS`` and than any step whose Go was
#: confirmed (a Go's rollup plan, which a slave reads before it passes the start on to its
#: workers, grows with the workloads). ``start_lead_ns`` gives every step's lead.
START_LEAD_NS = 1_000_000_000
#: The least lead of a step whose Go the hosts are known to read in time.
MIN_START_LEAD_NS = 250_000_000
#: A Go of this many workloads is read in time even before any Go was confirmed: on a loaded
#: 2-core test machine a Go of 400 workloads was confirmed 21 ms after it was sent, one of a
#: single workload in 3-8 ms.
SMALL_GO_WORKLOADS = 500
#: A step's lead is at least this many times the run's longest Go confirmation.
CONFIRM_MARGIN = 4


@dataclass(frozen=True)
class GoConfirmed:
    """What the run's steps so far say of its hosts reading a Go: the most workloads a step
    whose Go every host confirmed had, and the longest time from sending a step's Go to the
    last host's ``Pong`` to a ``Ping`` sent behind it."""

    workloads: int
    longest_ns: int


def start_lead_ns(rtt_ns: int, workloads: int, confirmed: GoConfirmed | None,
                  gather_lead_ns: int = 0) -> int:
    """How long after sending its Go a step of ``workloads`` starts: every slave must have read
    the Go and passed the start on to its workers by then (a late worker's first I/O would
    be late, and a paced one's catch up at once). ``MIN_START_LEAD_NS`` for a small Go or one
    of no more workloads than a confirmed one, ``START_LEAD_NS`` for another; at least
    ``CONFIRM_MARGIN`` times the run's longest confirmation, 20 round trips to the farthest
    host (``rtt_ns``), and what a ``gather:`` source needs before the start for its
    counters' base (``gather_lead_ns``)."""
    known = confirmed is not None and workloads <= confirmed.workloads
    lead = MIN_START_LEAD_NS if known or workloads <= SMALL_GO_WORKLOADS else START_LEAD_NS
    longest = confirmed.longest_ns if confirmed is not None else 0
    return max(lead, CONFIRM_MARGIN * longest, 20 * rtt_ns, gather_lead_ns)
