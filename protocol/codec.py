"""Encoding and framing: message ⇄ bytes. Pure (sans-I/O): callers pump the bytes.

Owns the frame layout, the payload encoding and the field checks of decoded messages. It never
executes or unpickles anything from the wire, never buffers more than one maximal frame, and
turns every malformed input into ``RemoteProtocolError`` (a peer's fault) — never a crash or a
hang. Encoding a message that breaks the rules is a ``LocalProtocolError`` (our fault).

Frame: ``b"IV"`` magic, ``u32`` little-endian payload length, payload. Payload: msgpack of
``[code, {field: value, ...}]`` with bin type for bytes. See ``protocol/SPEC.md``.
"""

from __future__ import annotations

import dataclasses
import struct
import types
import typing
from collections.abc import Callable
from typing import Any, Final

import msgpack

from protocol.errors import LocalProtocolError, RemoteProtocolError, VersionMismatchError
from protocol.messages import BY_CODE, Hello, HelloReply, Message
from protocol.version import PROTOCOL_VERSION

MAGIC: Final = b"IV"
_HEADER = struct.Struct("<2sI")
FRAME_HEADER_BYTES: Final = _HEADER.size  # 6
#: Largest payload accepted by default (a 10,000-workload result is tens of MiB).
DEFAULT_MAX_FRAME_BYTES: Final = 256 * 1024 * 1024

Checker = Callable[[Any], bool]


#: The exact Python types msgpack decodes each scalar field type to (no subclasses come off the
#: wire; bool is not an int here, as in ``_checker``).
_EXACT_TYPES: Final[dict[Any, frozenset[type]]] = {
    int: frozenset({int}), float: frozenset({int, float}), bool: frozenset({bool}),
    str: frozenset({str}), bytes: frozenset({bytes}),
}


def _checker(tp: Any) -> Checker:
    """A shallow-but-complete type check for the msgpack-native types messages use."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return lambda v: True
    if tp is int:
        return lambda v: isinstance(v, int) and not isinstance(v, bool)
    if tp is float:
        return lambda v: isinstance(v, int | float) and not isinstance(v, bool)
    if tp is bool:
        return lambda v: isinstance(v, bool)
    if tp is str:
        return lambda v: isinstance(v, str)
    if tp is bytes:
        return lambda v: isinstance(v, bytes)
    if origin is list:
        (item,) = typing.get_args(tp)
        exact = _EXACT_TYPES.get(item)
        if exact is not None:  # a list of scalars (10,000 workload ids): one pass in C
            return lambda v: isinstance(v, list) and set(map(type, v)) <= exact
        check_item = _checker(item)
        return lambda v: isinstance(v, list) and all(check_item(x) for x in v)
    if origin is dict:
        _key, val = typing.get_args(tp)
        check_val = _checker(val)
        return lambda v: isinstance(v, dict) and all(
            isinstance(k, str) and check_val(x) for k, x in v.items()
        )
    if origin in (typing.Union, types.UnionType):
        checks = [_checker(a) for a in typing.get_args(tp)]
        return lambda v: any(c(v) for c in checks)
    if tp is type(None):
        return lambda v: v is None
    raise TypeError(f"message field type {tp!r} is not supported on the wire")


@dataclasses.dataclass(frozen=True)
class _Schema:
    fields: tuple[str, ...]
    required: frozenset[str]
    checks: dict[str, Checker]


def _schema(cls: type[Message]) -> _Schema:
    hints = typing.get_type_hints(cls)
    fields = dataclasses.fields(cls)
    required = frozenset(
        f.name
        for f in fields
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    )
    return _Schema(
        fields=tuple(f.name for f in fields),
        required=required,
        checks={f.name: _checker(hints[f.name]) for f in fields},
    )


_SCHEMAS: Final[dict[type[Message], _Schema]] = {cls: _schema(cls) for cls in BY_CODE.values()}


def encode_payload(msg: Message) -> bytes:
    """The msgpack payload of one message (no frame header)."""
    schema = _SCHEMAS.get(type(msg))
    if schema is None:
        raise LocalProtocolError(f"{type(msg).__name__} is not a protocol message")
    body = {name: getattr(msg, name) for name in schema.fields}
    for name, value in body.items():
        if not schema.checks[name](value):
            raise LocalProtocolError(
                f"{type(msg).__name__}.{name} has a value of type {type(value).__name__} "
                "that the field does not allow"
            )
    try:
        packed: bytes = msgpack.packb([msg.CODE, body], use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as exc:
        raise LocalProtocolError(f"cannot encode {type(msg).__name__}: {exc}") from exc
    return packed


def encode(msg: Message, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> bytes:
    """One complete frame: header and payload."""
    payload = encode_payload(msg)
    if len(payload) > max_frame_bytes:
        raise LocalProtocolError(
            f"{type(msg).__name__} needs a {len(payload)}-byte frame, above the "
            f"{max_frame_bytes}-byte maximum"
        )
    return _HEADER.pack(MAGIC, len(payload)) + payload


def _reject_ext(code: int, data: bytes) -> Any:
    raise RemoteProtocolError(f"msgpack extension type {code} is not allowed")


def decode_payload(payload: bytes | bytearray | memoryview) -> Message:
    """Decode one payload into its message, checking every field."""
    try:
        obj = msgpack.unpackb(
            payload, raw=False, strict_map_key=True, use_list=True, ext_hook=_reject_ext
        )
    except RemoteProtocolError:
        raise
    except Exception as exc:  # msgpack raises a family of exceptions for bad input
        raise RemoteProtocolError(f"undecodable payload: {type(exc).__name__}: {exc}") from exc
    if not (isinstance(obj, list) and len(obj) == 2 and isinstance(obj[1], dict)):
        raise RemoteProtocolError("payload is not [code, fields]")
    code, body = obj
    cls = BY_CODE.get(code) if isinstance(code, int) and not isinstance(code, bool) else None
    if cls is None:
        raise RemoteProtocolError(f"unknown message code {code!r}")
    if cls in (Hello, HelloReply):
        version = body.get("protocol_version")
        if version != PROTOCOL_VERSION:
            raise VersionMismatchError(
                f"peer speaks protocol version {version!r}, this side speaks "
                f"{PROTOCOL_VERSION}; install the same ivypy version on both sides"
            )
    schema = _SCHEMAS[cls]
    unknown = set(body) - set(schema.fields)
    if unknown:
        raise RemoteProtocolError(f"{cls.__name__} has unknown fields {sorted(unknown)}")
    missing = schema.required - set(body)
    if missing:
        raise RemoteProtocolError(f"{cls.__name__} lacks fields {sorted(missing)}")
    for name, value in body.items():
        if not schema.checks[name](value):
            raise RemoteProtocolError(
                f"{cls.__name__}.{name} has a value of type {type(value).__name__} "
                "that the field does not allow"
            )
    return cls(**body)


class FrameDecoder:
    """Fed bytes in arbitrary pieces, yields whole messages.

    Memory is bounded: a frame whose declared length exceeds ``max_frame_bytes`` is refused as
    soon as its header is seen. After an error the decoder is broken and refuses further input
    (the connection must be dropped).
    """

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._buf = bytearray()
        self._broken: RemoteProtocolError | None = None

    @property
    def buffered_bytes(self) -> int:
        return len(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> list[Message]:
        """Add bytes; return every message completed by them (possibly none).

        Whole frames are decoded where they lie: from ``data`` itself when nothing is
        buffered (a frame that came in one piece is not copied before msgpack reads it), else
        from the buffer. Only an incomplete frame's bytes are kept."""
        if self._broken is not None:
            raise RemoteProtocolError(f"decoder already failed: {self._broken}")
        source: bytes | bytearray | memoryview = data
        if self._buf:
            self._buf += data
            source = self._buf
        out: list[Message] = []
        at = 0
        view = memoryview(source)
        try:
            while True:
                head = bytes(view[at:at + len(MAGIC)])
                if not MAGIC.startswith(head):
                    raise RemoteProtocolError(
                        f"bad frame magic {bytes(view[at:at + 32])!r}: is something else "
                        "writing to the protocol stream (a print on the slave's stdout, a "
                        "login banner)?"
                    )
                if len(view) - at < FRAME_HEADER_BYTES:
                    break
                _magic, length = _HEADER.unpack_from(view, at)
                if length > self.max_frame_bytes:
                    raise RemoteProtocolError(
                        f"frame of {length} bytes exceeds the {self.max_frame_bytes}-byte "
                        "maximum"
                    )
                end = at + FRAME_HEADER_BYTES + length
                if len(view) < end:
                    break
                payload = view[at + FRAME_HEADER_BYTES:end]
                try:  # msgpack copies what it keeps: the message holds no part of ``view``
                    out.append(decode_payload(payload))
                finally:
                    payload.release()
                at = end
            if source is not self._buf and at < len(view):
                self._buf += view[at:]
        except RemoteProtocolError as exc:
            self._broken = exc
            view.release()
            self._buf.clear()
            raise
        finally:
            view.release()
        if source is self._buf and at:
            del self._buf[:at]
        return out

    def at_frame_boundary(self) -> bool:
        """True when no partial frame is buffered (EOF here is a clean end)."""
        return not self._buf
