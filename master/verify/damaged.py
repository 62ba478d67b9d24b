"""A damaged block as the run folder keeps and tells it: the words for the stamp found, and the
block kept whole (its bytes as read in ``<name>.found``, what was expected and found in
``<name>.json``), for a run's reads (``master.run.verifying``) and a read-back
(``master.run.readback``) alike. Writes only what it is given; decides nothing."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from protocol import verify as pv


def stamp_words(found: Mapping[str, Any], run_key: int, writer: str, lun: str) -> str:
    """The stamp a damaged block's first sector out of line carries, in words: ``writer``
    and ``lun`` name the stamp's writer and LUN numbers."""
    if int(found["run_key"]) != run_key:
        return "no stamp of this run"
    return (f"a stamp of this run: generation {found['gen']}, writer {writer} (serial "
            f"{found['serial']}, attempt {found['attempt']}), LUN {lun} offset "
            f"{found['offset_bytes']}{', its CRC fails' if not found['crc_ok'] else ''}")


def expected_words(map_byte: int) -> str:
    """The generation a block's map byte expects, in words."""
    return (f"generation {pv.gen_of(map_byte)}"
            f"{' or the one before' if map_byte & pv.UNSETTLED else ''}")


def keep(folder: Path, name: str, finding: Mapping[str, Any], *, host: str, lun: str,
         run_key: int, writer: str, found_lun: str, context: Mapping[str, Any]) -> None:
    """Finding ``finding`` (``SubintervalResult.verify.findings``' form) kept whole in
    ``folder`` as ``name``: ``.found`` its bytes, ``.json`` what was expected and found, with
    ``context`` (where it was read: a step and subinterval, or a read-back) first."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.found").write_bytes(finding["data"])
    expected = int(finding["expected"])
    doc = {**context, "host": host, "lun": lun, "offset_bytes": finding["offset_bytes"],
           "length_bytes": pv.MAP_BLOCK_BYTES, "class": finding["class"],
           "workload": finding["workload_id"],
           "expected": {"generation": pv.gen_of(expected),
                        "unsettled": bool(expected & pv.UNSETTLED), "run_key": run_key,
                        "lun": lun, "first_sector_offset_bytes": finding["offset_bytes"]},
           "found": {**finding["found"], "writer": writer, "lun": found_lun},
           "first_bad_sector": finding["sector"], "found_bytes": f"{name}.found"}
    (folder / f"{name}.json").write_text(json.dumps(doc, indent=1) + "\n")
