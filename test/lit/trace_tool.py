# RUN: rm -rf %t && %PYTHON -m tools.trace --backend eager --quiet --out %t --lowered linalg-on-tensors %S/Inputs/tiny_train.py 3 | FileCheck %s --check-prefix=OUT
# RUN: cat %t/index.json | FileCheck %s --check-prefix=INDEX
# RUN: cat %t/001-*.torch.mlir | FileCheck %s
# RUN: cat %t/001-*.linalg-on-tensors.mlir | FileCheck %s --check-prefix=LINALG
# lazy-mlir-trace runs a script unmodified on the lazy device and writes each
# distinct graph once (three identical steps: one graph, three executions),
# in torch-dialect form with locations in the script, and lowered on request.

# OUT: loss {{[0-9.]+}}

# INDEX: "name": "[[NAME:lazy_graph_[0-9a-f]+]]"
# INDEX: "reason": "mark_step
# INDEX: "executions": 3
# INDEX: "001-[[NAME]].torch.mlir"
# INDEX: "001-[[NAME]].linalg-on-tensors.mlir"

# CHECK: // @lazy_graph_{{[0-9a-f]+}}(device_data[2, 4]:float32, device_data[2]:float32, device_data[8, 4]:float32, {{.*}}) -> ([2, 4]:float32, [2]:float32, [8, 2]:float32, []:float32)
# CHECK: // first executed for: mark_step
# CHECK: func.func @lazy_graph_{{[0-9a-f]+}}(
# CHECK: torch.aten.addmm {{.*}} -> !torch.vtensor<[8,2],f32> loc(#loc[[L:[0-9]+]])
# CHECK: torch.aten.mm
# CHECK: return
# The forward pass is line 14 of the script: `out = model(x)`.
# CHECK: #loc[[L]] = loc("{{.*}}Inputs/tiny_train.py":14:0)

# LINALG: func.func @lazy_graph_{{[0-9a-f]+}}(%arg0: tensor<2x4xf32>
# LINALG: linalg.matmul
# LINALG-NOT: torch.aten
