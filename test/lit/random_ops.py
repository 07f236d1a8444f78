# RUN: %PYTHON %s | FileCheck %s
# Random ops are drawn on the CPU generator (so results match eager PyTorch
# under the same seed) and enter the graph as device data arguments: no
# random op appears in the MLIR.
import torch
import lazy_core
from lazy_mlir.tools.lit_helpers import emit

lazy_core.init("eager")
x = torch.randn(3, 4).to("lazy")
noise = torch.rand(3, 4, device="lazy")
dropped = torch.nn.functional.dropout(x, 0.5, training=True)
emit([x + noise, dropped])

# CHECK: // signature: @{{.*}}(device_data[3, 4]:float32, device_data[3, 4]:float32, {{.*}}) -> ([3, 4]:float32, [3, 4]:float32)
# CHECK-NOT: torch.aten.rand
# CHECK-NOT: torch.aten.bernoulli
# CHECK-NOT: torch.aten.uniform
# CHECK: torch.aten.add.Tensor %arg0, %arg1
# CHECK-NOT: torch.aten.rand
# CHECK-NOT: torch.aten.bernoulli
