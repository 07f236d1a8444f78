"""lowering: lazy_core's IR -> torch-dialect MLIR, and pipelines to backend contracts.

Knows lazy_core's IR and torch-mlir; knows no backend.
"""

from . import dynamic
from .computation import ArgInfo, Computation, ResultInfo, from_carrier, to_carrier
from .context import LoweringContext, lower_graph, mlir_context
from .errors import LoweringError
from .pipelines import TARGETS, explain, lower, pipeline_for
from .supported_ops import can_lower, can_lower_call, depends_on_arguments, is_importable
from .version import version_key

__all__ = [
    "ArgInfo", "Computation", "dynamic", "can_lower", "can_lower_call", "depends_on_arguments", "explain", "LoweringContext", "LoweringError", "ResultInfo", "TARGETS",
    "from_carrier", "is_importable", "lower", "lower_graph", "mlir_context", "pipeline_for", "to_carrier",
    "version_key",
]
