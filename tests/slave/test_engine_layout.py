"""The compiled loop's structs (``slave/engine/ivy_loop.h``) and their Python mirrors, read from it
(``slave.engine.layout``: ``LoopArgs``, ``GEN_DTYPE``, ``DATA_DTYPE``,
``ROW_DTYPE``, ``IO_DTYPE``): every field's name, offset and size as compiled against the
mirror's, the slot row's iocb part against the kernel's ``struct iocb``, a mirror that drifted
from the header caught and named, and the loader refusing an object whose struct differs."""

from __future__ import annotations

import ctypes
import dataclasses
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from slave.engine import compiled_loop as pk
from slave.engine import layout
from slave.engine.layout import LoopArgs
from slave.sequencer import GeneratorState

#: the kernel's struct iocb (linux/aio_abi.h), little-endian x86_64: 64 bytes
IOCB_DTYPE = np.dtype(
    [
        ("aio_data", "<u8"),
        ("aio_key", "<u4"),
        ("aio_rw_flags", "<i4"),
        ("aio_lio_opcode", "<u2"),
        ("aio_reqprio", "<i2"),
        ("aio_fildes", "<u4"),
        ("aio_buf", "<u8"),
        ("aio_nbytes", "<u8"),
        ("aio_offset", "<i8"),
        ("aio_reserved2", "<u8"),
        ("aio_flags", "<u4"),
        ("aio_resfd", "<u4"),
    ]
)

needs_cc = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler here")


def _compile(tmp_path: Path, src: str) -> ctypes.CDLL:
    c_path = tmp_path / "kernel.c"
    c_path.write_text(src)
    so = tmp_path / "kernel.so"
    # -O0: a struct's layout is the same at every optimisation level (the ABI fixes it), and
    # the loop compiles in 0.2 s of CPU here against 0.9 s at the shipped -O2 (nine compiles)
    subprocess.run(["cc", "-O0", "-std=gnu11", "-shared", "-fPIC", "-o", str(so), str(c_path),
                    "-lm"], check=True, capture_output=True, timeout=120)
    return ctypes.CDLL(str(so))


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    """The source as shipped, compiled once for the tests that read its layout."""
    return _compile(tmp_path_factory.mktemp("kernel"), pk.source())


@needs_cc
def test_every_field_has_the_compiled_offset_and_size(compiled: ctypes.CDLL) -> None:
    lib = compiled
    c_size, c_fields = layout.compiled_layout(lib)
    py_size, py_fields = layout.python_layout()
    assert [f[0] for f in c_fields] == [name for name, _ in layout.FIELDS]
    assert c_fields == py_fields
    assert c_size == py_size == ctypes.sizeof(LoopArgs)
    assert layout.layout_difference(lib) is None
    # the C's own types: pointers and int64 words, 8 bytes each, no padding between them
    assert {size for _, _, size in c_fields} == {8}
    assert [off for _, off, _ in c_fields] == [8 * i for i in range(len(c_fields))]


@needs_cc
@pytest.mark.parametrize(("struct", "kinds"), [
    # the C's doubles are numpy's doubles, its 128-bit halves unsigned
    ("ivy_gen", {"f": ["hot_share", "period_ns", "read_fraction", "sched_last_ns"],
                 "u": ["inc_hi", "inc_lo", "sched_inc_hi", "sched_inc_lo", "sched_state_hi",
                       "sched_state_lo", "state_hi", "state_lo"]}),
    # the addresses and the key (a full 64-bit mix input) unsigned
    ("ivy_data", {"u": ["dedup_key", "dups", "pool", "vlun"]}),
    ("ivy_row", {}), ("ivy_io", {}), ("ivy_script", {}), ("ivy_pend", {}), ("ivy_log", {}),
    # the addresses (the map, the crash table)
    ("ivy_vlun", {"u": ["confirmed", "crash_attempts", "map"]}),
    ("ivy_vfind", {"u": ["found_offset_bytes", "found_serial"]}),
])
def test_every_field_of_each_struct_has_the_compiled_offset_and_size(
        compiled: ctypes.CDLL, struct: str, kinds: dict[str, list[str]]) -> None:
    lib = compiled
    dtype = layout.DTYPES[struct]
    c_size, c_fields = layout.compiled_layout(lib, struct)
    assert [f[0] for f in c_fields] == list(dtype.names or ())
    assert (c_size, c_fields) == layout.python_layout(struct)
    # every field one 8-byte word: the int64 views' columns (``layout``) are the fields
    assert c_size == dtype.itemsize == 8 * len(c_fields)
    columns = {"ivy_row": layout.ROW, "ivy_io": layout.IO, "ivy_log": layout.LOG}.get(struct)
    assert columns in (None, {name: off // 8 for name, off, _ in c_fields})
    of_kind = {name: dtype[name].kind for name in dtype.names or ()}
    for kind, names in kinds.items():
        assert sorted(n for n, k in of_kind.items() if k == kind) == names, kind


def test_a_generator_holds_each_field_of_its_state_where_the_struct_names_it() -> None:
    # compiled_loop.generator fills struct ivy_gen from GeneratorState's fields in order (each
    # 128-bit state as two words): every field, of a distinct value, lands in its namesake
    wide = [(1 << 127) + (i << 64) + 9 - i for i in range(4)]
    gs = GeneratorState(*wide, 11, 12, 13, 14, 0.25, 0.75, True, 17, False, 19.5, 20, 21,
                        22.5, True)
    g = pk.generator(gs, 24, 25)
    for i, name in enumerate(("state", "inc", "sched_state", "sched_inc")):
        assert (int(g[name + "_hi"]), int(g[name + "_lo"])) == (wide[i] >> 64, 9 - i), name
    struct_of = {"first_offset_bytes": "first_bytes", "n_hot_blocks": "n_hot",
                 "hot_zone_fraction": "hot_share", "first_arrival_due": "first_due"}
    for field in dataclasses.fields(GeneratorState)[4:]:
        value = getattr(gs, field.name)
        assert g[struct_of.get(field.name, field.name)] == value, field.name
    assert (g["op_read"], g["op_write"], g["made"], g["resync"]) == (24, 25, 0, 0)


def test_the_rows_iocb_part_is_the_kernels_iocb() -> None:
    # io_submit reads the row at its address: its first 64 bytes are struct iocb, byte for
    # byte (a word of the row holds two or three of the iocb's narrower fields)
    iocb, row = IOCB_DTYPE, layout.ROW_DTYPE
    assert iocb.fields is not None and row.fields is not None
    at = {name: row.fields[name][1] for name in row.names or ()}
    for mine, kernels in (("data", "aio_data"), ("key_rw_flags", "aio_key"),
                          ("opcode_fd", "aio_lio_opcode"), ("buf", "aio_buf"),
                          ("nbytes", "aio_nbytes"), ("offset", "aio_offset"),
                          ("reserved2", "aio_reserved2"), ("flags_resfd", "aio_flags")):
        assert at[mine] == iocb.fields[kernels][1], mine
    assert iocb.itemsize == 64 and at["owner"] == iocb.itemsize  # the bookkeeping after it
    assert layout.opcode_fd_word(layout.IOCB_CMD_PWRITE, 7) == (
        layout.IOCB_CMD_PWRITE | 7 << 8 * (iocb.fields["aio_fildes"][1] - at["opcode_fd"]))
    # the I/O's fields are scattered into their namesakes in the row
    assert [layout.ROW[name] for name in layout.IO] == layout.SCATTER.tolist()


def _header_edited(old: str, new: str) -> str:
    src = pk.source()
    assert src.count(old) == 1, old
    return src.replace(old, new)


#: where ``struct ivy_loop``'s field ``p`` stands (its index; every field is one word) and how
#: many fields it has: the header's, so that a field added before them moves these too
_P_INDEX = [name for name, _ in layout.FIELDS].index("p")
_N_LOOP_FIELDS = len(layout.FIELDS)


@needs_cc
@pytest.mark.parametrize(("old", "new", "said"), [
    # two fields swapped in the header: same size, other order
    ("X(int64_t, p) \\\n    X(int64_t, binned)", "X(int64_t, binned) \\\n    X(int64_t, p)",
     f"field {_P_INDEX}: compiled (name, offset, size) ('binned', {8 * _P_INDEX}, 8), the "
     f"Python mirror's ('p', {8 * _P_INDEX}, 8)"),
    # a field narrowed: its size, then every later offset
    ("X(int64_t, ctx)", "X(int32_t, ctx)", "field 4: compiled (name, offset, size) "
     "('ctx', 32, 4), the Python mirror's ('ctx', 32, 8)"),
    # a field added at the end
    ("X(int64_t *, vcount)", "X(int64_t *, vcount) X(int64_t, extra)",
     f"field {_N_LOOP_FIELDS}: compiled (name, offset, size) ('extra', {8 * _N_LOOP_FIELDS}, "
     "8), the Python mirror's None"),
    # a generator's fields swapped
    ("X(double, hot_share) \\\n    X(double, read_fraction)",
     "X(double, read_fraction) \\\n    X(double, hot_share)",
     "field 12: compiled (name, offset, size) ('read_fraction', 96, 8), the Python mirror's "
     "('hot_share', 96, 8)"),
    # a write data's fields swapped
    ("X(uint64_t, dedup_key) \\\n    X(int64_t, unique_below)",
     "X(int64_t, unique_below) \\\n    X(uint64_t, dedup_key)",
     "field 6: compiled (name, offset, size) ('unique_below', 48, 8), the Python mirror's "
     "('dedup_key', 48, 8)"),
    # a row's bookkeeping fields swapped
    ("X(int64_t, submit_ns) \\\n    X(int64_t, sched_ns) \\\n    X(int64_t, size_bytes)",
     "X(int64_t, sched_ns) \\\n    X(int64_t, submit_ns) \\\n    X(int64_t, size_bytes)",
     "field 10: compiled (name, offset, size) ('sched_ns', 80, 8), the Python mirror's "
     "('submit_ns', 80, 8)"),
    # an I/O's field narrowed
    ("X(int64_t, cat) \\\n    X(int64_t, submit_ns) \\\n    X(int64_t, sched_ns)\n",
     "X(int32_t, cat) \\\n    X(int64_t, submit_ns) \\\n    X(int64_t, sched_ns)\n",
     "field 2: compiled (name, offset, size) ('cat', 16, 4), the Python mirror's "
     "('cat', 16, 8)"),
    # the scripted engine's pending completion: its slot and result swapped
    ("X(int64_t, slot) \\\n    X(int64_t, res)", "X(int64_t, res) \\\n    X(int64_t, slot)",
     "field 1: compiled (name, offset, size) ('res', 8, 8), the Python mirror's "
     "('slot', 8, 8)"),
])
def test_a_header_the_mirror_does_not_follow_is_named(tmp_path: Path, old: str, new: str,
                                                      said: str) -> None:
    lib = _compile(tmp_path, _header_edited(old, new))
    struct = ("ivy_gen" if "hot_share" in old else "ivy_data" if "dedup_key" in old
              else "ivy_row" if "size_bytes" in old
              else "ivy_io" if "int32_t, cat" in new
              else "ivy_pend" if "slot" in old else "ivy_loop")
    assert layout.layout_difference(lib) == f"struct {struct} {said}"


def test_a_pointer_field_takes_a_contiguous_array_and_keeps_it() -> None:
    args = LoopArgs()
    a = np.arange(6, dtype=np.int64)
    args.array("cur", a)
    assert args.cur == a.ctypes.data and args.address == ctypes.addressof(args)
    del a  # the struct keeps it: the address stays valid
    assert ctypes.c_int64.from_address(args.cur).value == 0
    assert ctypes.c_int64.from_address(args.cur + 40).value == 5
    with pytest.raises(ValueError, match="field rows must be C-contiguous"):
        args.array("rows", np.zeros((4, 4), dtype=np.int64)[:, 1])
    with pytest.raises(ValueError, match="field flush_at is not a pointer"):
        args.array("flush_at", np.zeros(1, dtype=np.int64))


def test_the_state_fields_start_at_zero_and_hold_int64() -> None:
    args = LoopArgs()
    assert [getattr(args, name) for name in ("p", "binned", "in_flight", "heap_n", "n", "t_ns",
                                             "sub_done", "sub_n", "mean_ns")] == [0] * 9
    args.t_ns = (1 << 62) + 3
    args.sub_done = -1
    assert (args.t_ns, args.sub_done) == ((1 << 62) + 3, -1)


def test_the_source_compiled_carries_the_header() -> None:
    src = pk.source()  # what is compiled, hashed into the object's name and shipped
    assert "#define IVY_LOOP_FIELDS(X)" in src and '#include "ivy_loop.h"' not in src
    assert src.index("struct ivy_loop {") < src.index("int64_t paced_run(struct ivy_loop *L)")


@needs_cc
def test_the_loader_refuses_an_object_whose_struct_differs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("_fn", "_lib", "_why_not", "_origin"):
        monkeypatch.setattr(pk, name, None)
    monkeypatch.setattr(layout, "layout_difference", lambda lib: "field 0: (a drift)")
    assert not pk.available()
    assert pk.why_not() == ("the compiled paced loop does not match this slave: "
                            "field 0: (a drift)")


@pytest.mark.parametrize(("text", "fields"), [
    # continued lines, pointers, and comments that name a field or hold an X( of their own
    ("#define IVY_T_FIELDS(X) \\\n    X(int64_t, a) /* X(int64_t, not_me) */ \\\n"
     "    /* a comment, \\\n     * on two lines */ \\\n    X(const uint8_t *, p) \\\n"
     "    X(double, d)\nX(int64_t, after_the_macro)\n",
     [("a", "int64_t"), ("p", "const uint8_t *"), ("d", "double")]),
    ("#define IVY_T_FIELDS(X) \\\n    X(uint64_t, only)\n", [("only", "uint64_t")]),
])
def test_the_header_s_fields_are_read_in_order(text: str, fields: list[tuple[str, str]]
                                                ) -> None:
    assert layout.header_fields("t", text) == fields


@pytest.mark.parametrize(("text", "said"), [
    ("#define IVY_U_FIELDS(X) \\\n    X(int64_t, a)\n", "declares no IVY_T_FIELDS"),
    ("#define IVY_T_FIELDS(X) \\\n    X(int32_t, narrow)\n",
     "struct ivy_t field narrow: type 'int32_t'"),
])
def test_a_header_the_mirrors_cannot_read_is_refused(text: str, said: str) -> None:
    with pytest.raises(ValueError, match=said):
        layout.header_fields("t", text)

