"""Named latency distributions (10**6 samples each, integer ns) for histogram accuracy tests,
in the manner of DDSketch's tests/datasets.py."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

N = 1_000_000
Sampler = Callable[[np.random.Generator, int], npt.NDArray[np.float64]]


def _bimodal_ssd(rng: np.random.Generator, n: int) -> npt.NDArray[np.float64]:
    """An SSD-like mix: 97 % of reads around 50 µs, a 3 % tail around 5 ms."""
    fast = rng.normal(50_000, 4_000, n)
    slow = rng.lognormal(np.log(5e6), 0.3, n)
    return np.where(rng.random(n) < 0.97, fast, slow)


DATASETS: dict[str, Sampler] = {
    "uniform": lambda rng, n: rng.uniform(10_000, 2_000_000, n),
    "normal": lambda rng, n: rng.normal(1_000_000, 100_000, n),
    "exponential": lambda rng, n: rng.exponential(250_000, n),
    "lognormal": lambda rng, n: rng.lognormal(np.log(200_000), 1.0, n),
    "bimodal_ssd": _bimodal_ssd,
    # Pareto with shape 0.9 from 100 µs: a heavy tail whose largest samples reach minutes.
    "pareto_minutes": lambda rng, n: 100_000 * (1 + rng.pareto(0.9, n)),
    "constant": lambda rng, n: np.full(n, 123_456.0),
    "small_integers": lambda rng, n: rng.integers(0, 200, n).astype(np.float64),
}


def sample(name: str, n: int = N, seed: int = 12345) -> npt.NDArray[np.int64]:
    values = DATASETS[name](np.random.default_rng(seed), n)
    return np.clip(np.rint(values), 0, None).astype(np.int64)
