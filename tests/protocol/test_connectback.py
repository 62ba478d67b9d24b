"""The connect-back handshake's proofs (``protocol.connectback``): each role's proof differs,
and a change of the token, the certificate's fingerprint, either nonce or the name changes it;
lines parse or are refused saying why."""

from __future__ import annotations

import pytest

from protocol import connectback as cb

BASE = {"token": "s3cret", "role": "slave", "cert_fingerprint": b"\x01" * 32,
        "nonce_slave": "aa", "nonce_master": "bb", "name": "h1"}


@pytest.mark.parametrize("change", [
    {"token": "s3cres"}, {"role": "master"}, {"cert_fingerprint": b"\x02" * 32},
    {"nonce_slave": "ab"}, {"nonce_master": "bc"}, {"name": "h2"},
])
def test_every_input_of_a_proof_changes_it(change: dict[str, object]) -> None:
    base = cb.proof(**BASE)  # type: ignore[arg-type]
    assert cb.proof(**{**BASE, **change}) != base  # type: ignore[arg-type]
    assert cb.proves(base, cb.proof(**BASE))  # type: ignore[arg-type]
    assert not cb.proves(base, None) and not cb.proves(base, base[:-1])


def test_lines_round_trip_and_bad_ones_are_refused() -> None:
    assert cb.parse(cb.line({"a": 1})) == {"a": 1}
    for bad, says in ((b"{}", "cut short"), (b"[1]\n", "not an object"),
                      (b"{\n", "not JSON"), (b"x" * 5000 + b"\n", "too long")):
        with pytest.raises(ValueError, match=says):
            cb.parse(bad)
    with pytest.raises(ValueError, match="role"):
        cb.proof(**{**BASE, "role": "other"})  # type: ignore[arg-type]
    assert len(cb.new_nonce()) == 2 * cb.NONCE_BYTES
