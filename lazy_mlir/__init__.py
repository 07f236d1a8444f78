"""The ``lazy_mlir`` namespace: lazy-mlir's backends, lowering, tools and tests.

Installed from the wheel, the repository's top-level folders ``backends/``,
``lowering/``, ``tools/`` and ``test/`` become ``lazy_mlir.backends``,
``lazy_mlir.lowering``, ``lazy_mlir.tools`` and ``lazy_mlir.tests`` (see
``setup.py``), so site-packages gains only ``lazy_core`` and ``lazy_mlir``:
no generic top-level module that another package could also install. In a
source checkout the folders stay where they are and this package's search
path includes the repository root, so ``import lazy_mlir.backends`` means the
same code in both layouts. Import these packages only through ``lazy_mlir``
(``tools/rename_imports.py`` rewrites old spellings).
"""

import os as _os

_here = _os.path.dirname(_os.path.abspath(__file__))
_root = _os.path.dirname(_here)
if not _os.path.isdir(_os.path.join(_here, "backends")) and _os.path.isfile(
    _os.path.join(_root, "backends", "__init__.py")
):
    __path__.append(_root)  # noqa: F821 - a package's __path__ is set by the import system
