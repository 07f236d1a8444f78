"""Backends: the MLIR base backend and its reference and IREE subclasses.

Import a backend module directly (``backends.reference``, ``backends.iree``);
``lazy_core`` finds them by name through the ``lazy_core.backends`` entry
points declared in pyproject.toml.
"""
