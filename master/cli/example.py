"""``ivypy example [NAME] [-o FILE]``: the example tests that ship with ivypy, to start from.

Without NAME, lists them (name, what each does). With NAME, writes that test to ``FILE``
(default ``./NAME.yaml``; ``-`` prints it): a file already there is left alone (exit 2) unless
``--force`` says to replace it. The examples are the package's (``master/examples/``, the
repository's ``configs/`` points at them), so an installed ivypy has them too.

Exit codes: 0 listed or written; 2 no such example, or the file exists; 4 it could not be
written. Must not: write anything but the one file asked for.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from importlib import resources
from pathlib import Path
from typing import Any

EXIT_OK, EXIT_REFUSED, EXIT_OUTPUT = 0, 2, 4


def examples() -> dict[str, str]:
    """Each shipped example's name → its text."""
    folder = resources.files("master").joinpath("examples")
    return {entry.name.removesuffix(".yaml"): entry.read_text(encoding="utf-8")
            for entry in sorted(folder.iterdir(), key=lambda e: e.name)
            if entry.name.endswith(".yaml")}


def _description(text: str) -> str:
    """The test's ``description:``, else its first comment line."""
    for line in text.splitlines():
        if line.startswith("description:"):
            return line.removeprefix("description:").strip()
    first = next((ln for ln in text.splitlines() if ln.startswith("#")), "#")
    return first.lstrip("#").strip()


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "example", help="write an example test to start from (or list them)",
        description="Write one of the example tests that ship with ivypy to FILE (default "
        "./NAME.yaml; - prints it), or list them. An existing file is left alone unless "
        "--force. Exit codes: 0 done, 2 no such example or the file exists, 4 not writable.")
    p.add_argument("name", metavar="NAME", nargs="?", help="the example (none: list them)")
    p.add_argument("-o", "--output", metavar="FILE", help="where to write it (- for stdout)")
    p.add_argument("--force", action="store_true", help="replace FILE if it exists")
    p.set_defaults(func=example_command)


def example_command(args: argparse.Namespace) -> int:
    shipped = examples()
    if args.name is None:
        width = max(map(len, shipped))
        for name, body in shipped.items():
            print(f"{name:<{width}}  {_description(body)}")
        return EXIT_OK
    text = shipped.get(args.name)
    if text is None:
        close = difflib.get_close_matches(args.name, list(shipped), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        print(f"ivypy: example: no example {args.name!r}{hint}; there are "
              f"{', '.join(shipped)}", file=sys.stderr)
        return EXIT_REFUSED
    if args.output == "-":
        sys.stdout.write(text)
        return EXIT_OK
    path = Path(args.output or f"{args.name}.yaml")
    try:
        with open(path, "w" if args.force else "x", encoding="utf-8") as fh:
            fh.write(text)
    except FileExistsError:
        print(f"ivypy: example: {path} exists: left as it is (--force replaces it)",
              file=sys.stderr)
        return EXIT_REFUSED
    except OSError as exc:
        print(f"ivypy: example: cannot write {path}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_OUTPUT
    print(f"wrote {path}: ivypy run {path} --dry-run shows its plan")
    return EXIT_OK
