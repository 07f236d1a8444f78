"""Rewrite imports of ``backends``, ``lowering`` and ``tools`` to ``lazy_mlir.<name>``.

The repository keeps those three folders at its top level, but the wheel
installs them as ``lazy_mlir.backends``, ``lazy_mlir.lowering`` and
``lazy_mlir.tools`` (generic top-level names would collide with other
packages), and ``lazy_mlir/__init__.py`` makes the same names work in a
source checkout. Code must therefore import them through ``lazy_mlir``; this
script rewrites the old spellings in place and is idempotent, so it can run
again after merging branches written against the old names::

    python tools/rename_imports.py            # the whole repository
    python tools/rename_imports.py --check    # exit 1 if anything would change

Rewritten, in ``.py`` files only (documentation is edited by hand):

* ``from backends.x import y``   -> ``from lazy_mlir.backends.x import y``
* ``import backends.x as y``     -> ``import lazy_mlir.backends.x as y``
* ``import lowering``            -> ``from lazy_mlir import lowering``
* ``import lowering.x``          -> ``from lazy_mlir import lowering`` + ``import lazy_mlir.lowering.x``
* quoted dotted paths (``"tools.trace"``, ``-m tools.fuzz`` arguments,
  monkeypatch targets) -> ``"lazy_mlir.tools.trace"``.
"""

from __future__ import annotations

import argparse
import os
import re
import sys

NAMES = ("backends", "lowering", "tools")
_N = "|".join(NAMES)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SKIP_DIRS = {".git", ".venv", "build", "__pycache__", "Output", "results", "node_modules"}

_FROM = re.compile(rf"^(\s*)from ({_N})((?:\.\w+)*) import ", re.M)
_IMPORT_AS = re.compile(rf"^(\s*)import ({_N})((?:\.\w+)*) as ", re.M)
_IMPORT_BARE = re.compile(rf"^(\s*)import ({_N})[ \t]*(#.*)?$", re.M)
_IMPORT_DOTTED = re.compile(rf"^(\s*)import ({_N})((?:\.\w+)+)[ \t]*(#.*)?$", re.M)
_QUOTED = re.compile(rf"""(["'])({_N})\.([A-Za-z_]\w*(?:\.\w+)*)(?=[:"'])""")


def rewrite(text: str) -> str:
    """``text`` with every old-style import of NAMES rewritten (idempotent)."""
    text = _FROM.sub(r"\1from lazy_mlir.\2\3 import ", text)
    text = _IMPORT_AS.sub(r"\1import lazy_mlir.\2\3 as ", text)
    text = _IMPORT_BARE.sub(lambda m: f"{m.group(1)}from lazy_mlir import {m.group(2)}"
                            + (f"  {m.group(3)}" if m.group(3) else ""), text)
    text = _IMPORT_DOTTED.sub(lambda m: f"{m.group(1)}from lazy_mlir import {m.group(2)}\n"
                              f"{m.group(1)}import lazy_mlir.{m.group(2)}{m.group(3)}"
                              + (f"  {m.group(4)}" if m.group(4) else ""), text)
    text = _QUOTED.sub(r"\1lazy_mlir.\2.\3", text)
    return text


def python_files(root: str) -> list[str]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and not d.endswith(".egg-info")]
        out += [os.path.join(dirpath, f) for f in filenames if f.endswith(".py")]
    return sorted(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", default=[ROOT], help="files or folders (default: the repository)")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a file would change")
    args = parser.parse_args(argv)
    changed = []
    for path in args.paths:
        files = python_files(path) if os.path.isdir(path) else [path]
        for f in files:
            if os.path.abspath(f) == os.path.abspath(__file__):
                continue  # its docstring shows the old spellings
            with open(f, encoding="utf-8") as fh:
                old = fh.read()
            new = rewrite(old)
            if new != old:
                changed.append(os.path.relpath(f))
                if not args.check:
                    with open(f, "w", encoding="utf-8") as fh:
                        fh.write(new)
    for f in changed:
        print(("would rewrite " if args.check else "rewrote ") + f)
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
