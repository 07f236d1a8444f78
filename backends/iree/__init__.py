"""IREE backends: ``iree-cpu`` (llvm-cpu), ``iree-vulkan`` (vulkan-spirv), ``iree-cuda`` (cuda).

One implementation (``IreeBackend``) configured per target; the factories
below are the entry points pyproject.toml registers with lazy_core.
"""

from .backend import IreeBackend, make_iree_cpu, make_iree_cuda, make_iree_vulkan
from .config import IreeConfig, TargetSpec

__all__ = ["IreeBackend", "IreeConfig", "TargetSpec", "make_iree_cpu", "make_iree_cuda", "make_iree_vulkan"]
