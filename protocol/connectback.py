"""The connect-back handshake: a slave started by something else (a DaemonSet, a Job, ``srun``)
dials its master, and each proves to the other that it holds the run's token before the
protocol starts (docs/transports.md).

The conversation runs in TLS: the master's certificate is its own, made for the run, and the
slave does not check it against any authority. Instead both prove the token bound to the
certificate the slave saw (its SHA-256 fingerprint), with the slave's and the master's fresh
nonces, and the slave's name: ``HMAC-SHA256(token, role | fingerprint | nonce_slave |
nonce_master | name)``. Someone on the path without the token cannot answer either proof, and
one who puts its own certificate in between changes the fingerprint the slave binds its proof
to, so the master's check fails: nobody without the token reads or alters the conversation.

The three lines, JSON, each at most ``MAX_LINE_BYTES``, before the protocol's first frame::

    slave → master   {"ivypy_connect": 1, "name": NAME, "nonce": HEX}
    master → slave   {"nonce": HEX, "proof": HEX}       (or {"error": TEXT}, then the end)
    slave → master   {"proof": HEX}
    master → slave   {"ok": true}                       (or {"error": TEXT}, then the end)

Pure: no sockets, no clocks (``protocol`` imports only the standard library, numpy, msgpack).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from typing import Any, Final

FORMAT: Final = 1
MAX_LINE_BYTES: Final = 4096
NONCE_BYTES: Final = 32


def fingerprint(cert_der: bytes) -> bytes:
    """The SHA-256 of a certificate as the TLS peer presented it (DER)."""
    return hashlib.sha256(cert_der).digest()


def new_nonce() -> str:
    return secrets.token_hex(NONCE_BYTES)


def proof(token: str, role: str, cert_fingerprint: bytes, nonce_slave: str, nonce_master: str,
          name: str) -> str:
    """``role`` (``master`` or ``slave``) proves it holds ``token``, bound to the certificate
    the slave saw, both nonces and the slave's name."""
    if role not in ("master", "slave"):
        raise ValueError(f"role {role!r}")
    msg = b"|".join([b"ivypy-connect-back-1", role.encode(), cert_fingerprint,
                     nonce_slave.encode(), nonce_master.encode(), name.encode()])
    return hmac.new(token.encode(), msg, hashlib.sha256).hexdigest()


def proves(expected: str, given: Any) -> bool:
    """Whether ``given`` is the proof ``expected`` (compared in constant time)."""
    return isinstance(given, str) and hmac.compare_digest(expected, given)


def line(obj: dict[str, Any]) -> bytes:
    """One handshake line."""
    data = json.dumps(obj, separators=(",", ":")).encode() + b"\n"
    if len(data) > MAX_LINE_BYTES:
        raise ValueError(f"a handshake line of {len(data)} bytes")
    return data


def parse(data: bytes) -> dict[str, Any]:
    """One handshake line read; ``ValueError`` naming what is wrong with it."""
    if len(data) > MAX_LINE_BYTES or not data.endswith(b"\n"):
        raise ValueError("not a handshake line (too long, or cut short)")
    try:
        obj = json.loads(data)
    except ValueError:
        raise ValueError("not a handshake line (not JSON)") from None
    if not isinstance(obj, dict):
        raise ValueError("not a handshake line (not an object)")
    return obj
