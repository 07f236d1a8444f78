# RUN: rm -rf %t && %PYTHON -m tools.trace --backend eager --quiet --inline-locations --out %t %lazy_mlir_src/examples/mnist.py --steps 2 --epochs 1 --no-compare-eager --no-progress | FileCheck %s --check-prefix=OUT
# RUN: cat %t/*.torch.mlir | FileCheck %s
# The MNIST example's training step, traced unmodified: the MLIR of the step
# carries locations that point into examples/mnist.py (the model's forward,
# the loss line, backward and the optimizer step), so a compiler error in any
# of them names the example's own line.

# OUT: trained 2 steps

# CHECK: torch.aten.convolution {{.*}} -> !torch.vtensor<[64,{{[0-9]+}},28,28],f32> loc("{{.*}}examples/mnist.py":{{[0-9]+}}:0)
# CHECK: torch.aten.isnan {{.*}} loc("{{.*}}examples/mnist.py":{{[0-9]+}}:0)
# CHECK: torch.aten.nll_loss_forward {{.*}} loc("{{.*}}examples/mnist.py":{{[0-9]+}}:0)
# CHECK: torch.aten.le.Tensor {{.*}} loc("{{.*}}examples/mnist.py":{{[0-9]+}}:0)
# CHECK: torch.aten.convolution_backward {{.*}} loc("{{.*}}examples/mnist.py":{{[0-9]+}}:0)
# CHECK-NOT: loc("{{.*}}/torch/
# CHECK-NOT: loc("{{.*}}/lazy_core/
