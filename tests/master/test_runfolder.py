"""Reading a run folder's CSV files (``master.results.runfolder.load_table``): rows split at line
ends only, and a row cut by a crash left out."""

from __future__ import annotations

from pathlib import Path

import pytest

from master.results.runfolder import load_row_texts, load_table


@pytest.mark.parametrize("char", ["\x0c", "\x0b", "\x1c", "\x85", "\u2028", "\u2029"])
@pytest.mark.parametrize("quoted", [False, True])
def test_a_cell_holding_a_character_str_splitlines_breaks_at_is_one_row(
        tmp_path: Path, char: str, quoted: bool) -> None:
    # an events.csv message may hold such a character (an error text, a device's name); the
    # row once split there and was left out as cut
    message = f"stopped{char}here"
    cell = f'"{message}, with a comma"' if quoted else message
    path = tmp_path / "events.csv"
    path.write_text(f"level,message\r\nINFO,first\r\nERROR,{cell}\r\nINFO,last\r\n",
                    encoding="utf-8")
    table = load_table(path)
    want = f"{message}, with a comma" if quoted else message
    assert table.rows == [("INFO", "first"), ("ERROR", want), ("INFO", "last")]
    assert table.cut == 0


@pytest.mark.parametrize("end", ["\n", "\r\n", "\r"])
def test_rows_end_at_any_line_end_and_a_last_row_cut_short_is_left_out(
        tmp_path: Path, end: str) -> None:
    path = tmp_path / "all.csv"
    path.write_text(end.join(["subinterval,IOPS", "0,100", "1,200", "2,3"]), encoding="utf-8")
    table = load_table(path, ["IOPS"])
    assert table.header == ("IOPS",)
    assert table.rows == [("100",), ("200",)]
    assert table.cut == 1


@pytest.mark.parametrize("where, kept", [
    (None, ["0,a,all", "0,a,host", "1,b,all"]),
    ({}, ["0,a,all", "0,a,host", "1,b,all"]),
    ({"rollup_type": "all"}, ["0,a,all", "1,b,all"]),
    ({"rollup_type": "all", "step_name": "b"}, ["1,b,all"]),
    ({"rollup_type": "lun"}, []),
    ({"no_such_column": ""}, []),  # a column the file lacks holds no text
])
def test_the_rows_whose_columns_hold_the_texts_asked_for(
        tmp_path: Path, where: dict[str, str] | None, kept: list[str]) -> None:
    path = tmp_path / "summary.csv"
    path.write_text("step_number,step_name,rollup_type\n0,a,all\n0,a,host\n1,b,all\n")
    header = ("step_number", "step_name", "rollup_type")
    assert load_table(path).dicts(where) == [dict(zip(header, k.split(","), strict=True))
                                             for k in kept]


@pytest.mark.parametrize("text", [
    "a,b,c\n1,2,3\n4,5,6\n",
    "a,b,c\r\n1,2,3\r\n4,5\r\n7,8,9\r\n",  # a row of the wrong length
    "a,b,c\r1,2,3\r4,5,6\r7,8",  # CR line ends, the last row cut by a crash
    "a,b,c\n1,2,3\n\n4,5,6\n",  # a blank line
    'a,b,c\n1,"x, y\nz",3\n4,5,6\n"7",8\n',  # quoted across lines; a short row
    'a,b,c\n1,"x\x0cy",\u2028\n4,5,6',  # a form feed and U+2028 in cells; cut
])
def test_rows_kept_as_their_texts_are_the_rows_of_the_table(tmp_path: Path, text: str) -> None:
    """``load_row_texts``: each row's text, whose cells are the table's row, the same rows
    left out."""
    path = tmp_path / "summary.csv"
    path.write_bytes(text.encode())
    table, texts = load_table(path), load_row_texts(path)
    assert texts.header == table.header
    assert texts.cells(texts.texts) == table.rows and texts.cut == table.cut
