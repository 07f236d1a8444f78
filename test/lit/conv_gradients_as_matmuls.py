# RUN: %PYTHON %s | FileCheck %s
# A target whose matmul code beats its convolution code (iree-cpu) asks for
# conv_gradients_as_matmuls (lowering/conv_matmuls.py): the weight gradient of a 2-d
# convolution is the output gradient's [N*OH*OW, F] matrix, transposed, times a channels-last
# im2col matrix (one slice per window position, concatenated); the stride-1 input gradient is
# that im2col of the padded output gradient times the flipped weight's matrix. With one input
# channel (a thin matmul) the weight gradient is one small matmul per image over an NCHW im2col,
# summed over the batch, and the input gradient (not asked for here) would stay
# convolution_backward's. The bias gradients sum each image's plane, then the batch.
import torch
import lazy_core
from lazy_mlir import lowering
from lazy_core.graph import build_graph
from lazy_mlir.tools.lit_helpers import print_computation

lazy_core.init("eager")
torch.manual_seed(0)
conv = torch.nn.Conv2d(8, 4, 3, padding=1).to("lazy")
x = torch.randn(2, 8, 6, 6).to("lazy").requires_grad_()
conv(x).square().sum().backward()
thin = torch.nn.Conv2d(1, 4, 3, padding=1).to("lazy")
thin(torch.randn(2, 1, 6, 6).to("lazy")).sum().backward()
graph = build_graph([conv.weight.grad._lz_value(), x.grad._lz_value(), conv.bias.grad._lz_value(),
                     thin.weight.grad._lz_value()])
print("// with conv_gradients_as_matmuls")
print_computation(lowering.lower_graph(graph, conv_gradients_as_matmuls=True), locations=False)
print("// without")
print_computation(lowering.lower_graph(graph), locations=False)

# CHECK-LABEL: // with conv_gradients_as_matmuls
# CHECK-NOT: torch.aten.convolution_backward
# The input gradient: the padded output gradient's im2col times the flipped weight's matrix.
# CHECK: torch.aten.flip %arg1
# CHECK: torch.aten.constant_pad_nd {{.*}} -> !torch.vtensor<[2,8,8,4],f32>
# CHECK: torch.aten.cat {{.*}} -> !torch.vtensor<[2,6,6,36],f32>
# CHECK: torch.aten.mm {{.*}} : !torch.vtensor<[72,36],f32>, !torch.vtensor<[36,8],f32> -> !torch.vtensor<[72,8],f32>
# CHECK: torch.aten.permute {{.*}} -> !torch.vtensor<[2,8,6,6],f32>
# The weight gradient: the output gradient's matrix, transposed, times the input's im2col.
# CHECK: torch.aten.permute %arg0, {{.*}} -> !torch.vtensor<[2,6,6,8],f32>
# CHECK: torch.aten.constant_pad_nd {{.*}} -> !torch.vtensor<[2,8,8,8],f32>
# CHECK: torch.aten.cat {{.*}} -> !torch.vtensor<[2,6,6,72],f32>
# CHECK: torch.aten.mm {{.*}} : !torch.vtensor<[4,72],f32>, !torch.vtensor<[72,72],f32> -> !torch.vtensor<[4,72],f32>
# CHECK: torch.aten.permute {{.*}} -> !torch.vtensor<[4,8,3,3],f32>
# The bias gradient: each image's plane summed, then the batch.
# CHECK: torch.aten.sum.dim_IntList {{.*}} : !torch.vtensor<[2,4,6,6],f32>, {{.*}} -> !torch.vtensor<[2,4],f32>
# CHECK: torch.aten.sum.dim_IntList {{.*}} : !torch.vtensor<[2,4],f32>, {{.*}} -> !torch.vtensor<[4],f32>
# One input channel: an NCHW im2col, one [4, 36] x [36, 9] matmul per image, summed over the batch.
# CHECK: torch.aten.constant_pad_nd %arg3, {{.*}} -> !torch.vtensor<[2,1,8,8],f32>
# CHECK: torch.aten.stack {{.*}} -> !torch.vtensor<[2,1,9,6,6],f32>
# CHECK: torch.aten.bmm {{.*}} : !torch.vtensor<[2,4,36],f32>, !torch.vtensor<[2,36,9],f32> -> !torch.vtensor<[2,4,9],f32>
# CHECK: torch.aten.sum.dim_IntList {{.*}} : !torch.vtensor<[2,4,9],f32>, {{.*}} -> !torch.vtensor<[4,9],f32>
# CHECK-LABEL: // without
# CHECK-NOT: torch.aten.mm
# CHECK: torch.aten.convolution_backward {{.*}} -> !torch.vtensor<[2,8,6,6],f32>, !torch.vtensor<[4,8,3,3],f32>, !torch.vtensor<[4],f32>
