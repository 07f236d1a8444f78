"""Command-line tools: ``lazy-mlir-trace``, ``lazy-mlir-opsupport`` and lit helpers.

Tools sit on top of everything else (lazy_core, lowering); nothing imports them.
"""
