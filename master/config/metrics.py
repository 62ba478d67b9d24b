"""The test's ``metrics:``: live metrics for Prometheus while the run goes (docs/metrics.md).

``metrics: {listen: ADDR:PORT, token_file: FILE, rollups: [TYPE, ...]}``
(``schema.MetricsConfig``): the address the master serves ``/metrics`` on while the run goes
(``ADDR:PORT``, ``[v6 address]:PORT``; port 0: any free one, which the console and events.csv
name), optionally a file holding a bearer token a scrape must send (its path kept, never its
token: resolved.json is no place for it), and the rollup types served (every one by default).
``ivypy run --metrics ADDR:PORT [--metrics-token-file FILE] [--metrics-rollups TYPES]`` gives
the same from the command line. Owns their parsing; serving is ``master.live.metrics``'.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from master.config.limits import duration_within
from master.config.rolluptypes import rollup_type_problem
from master.config.schema import ConnectBackConfig, MetricsConfig
from master.config.yamlnodes import Cursor

__all__ = ["CONNECT_BACK_KEYS", "METRICS_KEYS", "check_metric_rollups", "parse_connect_back",
           "parse_listen", "parse_metrics", "read_token"]

METRICS_KEYS: tuple[str, ...] = ("listen", "token_file", "rollups")
CONNECT_BACK_KEYS: tuple[str, ...] = ("listen", "token_file", "timeout_seconds")
#: the longest a run waits for its connect-back hosts to dial in (``timeout_seconds``)
CONNECT_BACK_TIMEOUT_RANGE: tuple[float, float] = (1.0, 3600.0)


def parse_listen(text: str) -> tuple[str, int]:
    """``ADDR:PORT`` (``[::1]:9464`` for IPv6) as (address, port); ``ValueError`` saying what
    is wrong."""
    host, sep, port_text = text.rpartition(":")
    if not sep or not host:
        raise ValueError(f"{text!r} is not ADDR:PORT (e.g. 0.0.0.0:9464, [::]:9464)")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"{text!r}: the port {port_text!r} is not a number") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"{text!r}: the port must be 0 to 65535 (0: any free port)")
    return host, port


def _listener(cursor: Cursor, keys: tuple[str, ...], shape: str, base: Path
              ) -> tuple[str, int, str | None]:
    """A listener's mapping (``metrics:``, ``connect_back:``): its ``listen`` address and
    port, and its ``token_file`` (None where absent; a relative one from ``base``, the
    directory ``output_root`` is resolved from)."""
    if not cursor.is_map:
        raise cursor.error(f"must be a mapping {{{shape}}} (got {cursor.shown()})")
    cursor.check_keys(keys)
    listen = cursor.require("listen")
    try:
        host, port = parse_listen(listen.string())
    except ValueError as exc:
        raise listen.error(str(exc)) from None
    token = cursor.get("token_file")
    if token is None:
        return host, port, None
    text = token.string()
    if not text:
        raise token.error("must not be empty")
    return host, port, str(Path(text) if Path(text).is_absolute()
                           else (base / text).expanduser())


def parse_metrics(cursor: Cursor | None, base: Path,
                  rollup_types: Sequence[str] | None = None) -> MetricsConfig | None:
    """The top level's ``metrics:`` (None when absent). ``rollup_types``: the test's, which
    ``rollups`` must name (None: not known, as the test's own failed to parse)."""
    if cursor is None:
        return None
    host, port, token_file = _listener(cursor, METRICS_KEYS,
                                       "listen: ADDR:PORT, token_file: FILE, rollups: [TYPE]",
                                       base)
    rollups = None
    node = cursor.get("rollups")
    if node is not None:
        node.expect_seq("a list of rollup types")
        rollups = tuple(item.string() for item in node)
        try:
            check_metric_rollups(rollups, rollup_types)
        except ValueError as exc:
            raise node.error(str(exc)) from None
    return MetricsConfig(host=host, port=port, token_file=token_file, rollups=rollups)


def check_metric_rollups(rollups: Sequence[str], rollup_types: Sequence[str] | None) -> None:
    """``ValueError`` saying what is wrong with the rollup types to serve: none, one named
    twice, or (where the test's are known) the first one the test does not have."""
    if not rollups:
        raise ValueError("names no rollup type (leave it out to serve every type)")
    twice = sorted({r for r in rollups if rollups.count(r) > 1})
    if twice:
        raise ValueError(f"names {', '.join(twice)} more than once")
    if rollup_types is not None:
        for rollup in rollups:
            problem = rollup_type_problem(rollup, rollup_types)
            if problem is not None:
                raise ValueError(problem)


def read_token(path: str, what: str = "metrics") -> str:
    """The token in ``path`` (its first line, stripped); ``ValueError`` naming ``what`` reads
    it (``metrics``, ``connect_back``) when it cannot be read or is empty."""
    try:
        with open(path, encoding="utf-8") as f:
            token = f.readline().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{what}: cannot read the token file {path}: "
                         f"{getattr(exc, 'strerror', None) or exc}") from None
    if not token:
        raise ValueError(f"{what}: the token file {path} holds no token on its first line")
    return token


def parse_connect_back(cursor: Cursor | None, base: Path) -> ConnectBackConfig | None:
    """The top level's ``connect_back:`` (None when absent): where the master listens for
    the slaves that dial it, the token file both sides prove (required), and how long it
    waits for them (default 120 s)."""
    if cursor is None:
        return None
    host, port, token_file = _listener(
        cursor, CONNECT_BACK_KEYS, "listen: ADDR:PORT, token_file: FILE, timeout_seconds: N",
        base)
    if port == 0:
        raise cursor.require("listen").error("needs a port the slaves are told: not 0")
    if token_file is None:
        raise cursor.require("token_file").error("is required")  # raises: missing key
    timeout_s = duration_within(cursor.get("timeout_seconds"), 120.0,
                                *CONNECT_BACK_TIMEOUT_RANGE, "at least 1s and at most 1h")
    return ConnectBackConfig(host=host, port=port, token_file=token_file, timeout_s=timeout_s)
