"""Hypothesis strategies that build every protocol message from its field types."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

from hypothesis import strategies as st

from protocol.messages import MESSAGE_TYPES, Message

_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=20),
    st.binary(max_size=64),
)
_any = st.recursive(
    _leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def for_type(tp: Any) -> st.SearchStrategy[Any]:
    origin = typing.get_origin(tp)
    if tp is Any:
        return _any
    if tp is int:
        return st.integers(min_value=-(2**63), max_value=2**63 - 1)
    if tp is float:
        return st.floats(allow_nan=False)
    if tp is bool:
        return st.booleans()
    if tp is str:
        return st.text(max_size=30)
    if tp is bytes:
        return st.binary(max_size=200)
    if origin is list:
        return st.lists(for_type(typing.get_args(tp)[0]), max_size=5)
    if origin is dict:
        return st.dictionaries(st.text(max_size=10), for_type(typing.get_args(tp)[1]), max_size=5)
    if origin in (typing.Union, types.UnionType):
        return st.one_of(*[for_type(a) for a in typing.get_args(tp)])
    if tp is type(None):
        return st.none()
    raise TypeError(tp)


def message_strategy(cls: type[Message]) -> st.SearchStrategy[Message]:
    hints = typing.get_type_hints(cls)
    fields = {f.name: for_type(hints[f.name]) for f in dataclasses.fields(cls)}
    return st.builds(cls, **fields)


any_message = st.one_of(*[message_strategy(cls) for cls in MESSAGE_TYPES])
