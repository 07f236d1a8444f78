# RUN: %PYTHON %s | FileCheck %s
# linalg-on-tensors: elementwise ops become linalg.generic with parallel
# iterators, a scalar parameter is read from its element of the packed f64
# argument with tensor.extract, and the locations survive lowering.
import torch
import lazy_core
from lazy_mlir.tools.lit_helpers import emit

lazy_core.init("eager")
x = torch.randn(2, 3).to("lazy")
y = torch.randn(2, 3).to("lazy")
emit([(x + y) * 0.5], target="linalg-on-tensors")

# CHECK: // form: linalg-on-tensors
# CHECK: func.func @lazy_graph_{{[0-9a-f]+}}(%arg0: tensor<2x3xf32> {{.*}}, %arg1: tensor<2x3xf32> {{.*}}, %arg2: tensor<1xf64> {{.*}}) -> tensor<2x3xf32>
# CHECK: %[[ELEM:.*]] = tensor.collapse_shape %arg2 [] : tensor<1xf64> into tensor<f64>
# CHECK: tensor.extract %[[ELEM]][] : tensor<f64>
# CHECK: linalg.generic {{{.*}}iterator_types = ["parallel", "parallel"]} ins(%arg0, %arg1 : tensor<2x3xf32>, tensor<2x3xf32>)
# CHECK: arith.addf {{.*}} loc("{{.*}}pipeline_linalg_elementwise.py":12:0)
# CHECK: linalg.generic
# CHECK: arith.mulf
# CHECK-NOT: torch.
