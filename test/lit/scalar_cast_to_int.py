# RUN: %PYTHON %s | FileCheck %s
# F.pad(labels, value=-100) passes the value as a float scalar parameter into
# an int64 result. The lowering converts its pack element while still a
# tensor (f64 -> si64) and reads it as !torch.int: IREE cannot compile the
# scalar f64 -> i64 cast the op would otherwise need. The cast is guarded
# (lowering/float_to_int.py: NaN and values out of range become -2**63).
import torch
import lazy_core
from lazy_mlir.tools.lit_helpers import emit

lazy_core.init("eager")
labels = torch.randint(0, 10, (2, 5)).to("lazy")
emit([torch.nn.functional.pad(labels, (0, 1), value=-100)])

# CHECK: // signature: @{{.*}}(device_data[2, 5]:int64, scalar_pack[1]:float64) -> ([2, 6]:int64)
# CHECK: %[[ELEM:[0-9]+]] = torch.aten.select.int %arg1, {{.*}} -> !torch.vtensor<[],f64>
# CHECK: %[[G:[0-9]+]] = torch.aten.where.ScalarOther %{{[0-9]+}}, %[[ELEM]], {{.*}} -> !torch.vtensor<[],f64>
# CHECK: %[[INT:[0-9]+]] = torch.aten._to_copy %[[G]], {{.*}} -> !torch.vtensor<[],si64>
# CHECK: %[[V:[0-9]+]] = torch.aten.item %[[INT]] : !torch.vtensor<[],si64> -> !torch.int
# CHECK: torch.aten.constant_pad_nd %arg0, %{{[0-9]+}}, %[[V]] : !torch.vtensor<[2,5],si64>, !torch.list<int>, !torch.int -> !torch.vtensor<[2,6],si64>
