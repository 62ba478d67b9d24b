"""The engine loop's general path (``_loop``): any mix of workloads and engines, one turn at
a time, handing each turn to the paced loop (``loop_paced``, compiled where it can run)
where one serves the workloads as they are.

Its functions are ``EngineLoop``'s methods (bound in its class body, ``self`` the loop);
they are written here, apart from the loop's set-up and general path (``slave.engine.loop``),
so that each part of the hot path can be read on its own.
"""

from __future__ import annotations

import time
from os import sched_yield
from typing import TYPE_CHECKING

from slave.engine import tuning
from slave.engine.waits import timed_wait_ns

if TYPE_CHECKING:
    from slave.engine.loop import EngineLoop, LoopControl


def _loop(self: EngineLoop, control: LoopControl, start_ns: int, subinterval_ns: int) -> None:
    boundary = start_ns + subinterval_ns
    next_poll = time.monotonic_ns() + tuning.POLL_CONTROL_NS
    mono = time.monotonic_ns
    last_done = mono()  # when the last completion was reaped (busy polling spins after it)
    while not self._stop:
        now = mono()
        if now >= boundary:
            self._boundary(control, boundary)
            boundary += subinterval_ns
            continue
        if now >= next_poll:
            control.poll(self)
            next_poll = now + tuning.POLL_CONTROL_NS
            continue
        wake = boundary if boundary < next_poll else next_poll
        paced_words = self._paced_words
        if paced_words is not None:
            ps, eng, _ = paced_words
            assert ps.compiled is not None  # only a set that runs compiled is chosen
            boundary = self._loop_paced_compiled(control, ps.compiled, eng, boundary,
                                                 subinterval_ns, wake)
            continue
        if self._paced:
            due = self._submit_due(now)
            if due < wake:
                wake = due
        engines = self._engine_list
        if len(engines) == 1:
            eng = engines[0]
            if self._busy_poll:
                n = eng.poll()
                if not n:
                    sched_yield()  # let the device's kernel worker run if it shares our core
                    if now - last_done < tuning.BUSY_SPIN_NS:
                        continue
                    left = wake - mono()
                    if left < tuning.SLEEP_MIN_NS:  # too near to sleep: keep looking
                        continue
                    n = eng.reap(1, timed_wait_ns(left))
            else:
                # look in the ring first when completions are likely there (no syscall); a
                # short wait for a fuller batch (min_nr 8, 20 us) was measured: fewer IOPS
                # on an idle machine, no clear CPU saving under load
                n = eng.poll() if self._in_flight > 2 else 0
                if not n and self._in_flight and not self._paced:
                    # max-iops workloads only, as the lone-workload loops: look a while
                    # before blocking (one QD32 workload of 70 % reads: +1 to +11 % IOPS;
                    # eight of QD4: -5 to +6 %, within the VM's noise; the loop's Python
                    # is their limit)
                    n = self._waiter.wait(eng.poll, eng.reap, wake)
                elif not n:
                    left = wake - mono()
                    if left < tuning.SLEEP_MIN_NS:  # too near to sleep: look again
                        n = eng.poll()
                        if not n:
                            continue
                    else:
                        n = eng.reap(1, timed_wait_ns(left))
            if n:
                t = mono()
                last_done = t
                if t >= boundary:
                    boundary = self._reaped_late(control, eng, n, t, boundary, subinterval_ns)
                else:
                    self._complete(eng, n, t)
            continue
        if not engines:
            time.sleep(max(wake - mono(), 0) / 1e9)
            continue
        got = 0
        for eng in engines:
            n = eng.poll()
            if n:
                got += n
                last_done = mono()
                self._complete(eng, n, last_done)
        if not got:
            if self._busy_poll:  # as with one engine: spin a while, then block
                sched_yield()
                if now - last_done < tuning.BUSY_SPIN_NS:
                    continue
            left = wake - mono()
            if left >= tuning.SLEEP_MIN_NS:  # else too near to sleep: look again
                eng = engines[0]
                n = eng.reap(1, min(left, 200_000))
                if n:
                    self._complete(eng, n, mono())
