"""Is a mismatch eager PyTorch's own variance between CPU instruction sets?

ATen picks each CPU kernel by the instruction set it finds (``ATEN_CPU_CAPABILITY``:
default, avx2, avx512). The vectorized ``add``/``sub`` with ``alpha`` use a fused
multiply-add and the baseline kernel does not, so ``torch.sub(0.0, 1e-40, alpha=1e-6)``
is -0.0 on an AVX-512 machine and +0.0 with ``ATEN_CPU_CAPABILITY=default`` (fuzz seed
4004, programs 46' and 177: every lazy backend gave +0.0). A lazy value that equals what
eager returns on another instruction set is one PyTorch itself returns, so the fuzzer
reports it as such instead of as a wrong value, after checking that the shrunk repro
fails alone and passes against the baseline kernels.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

#: Seconds one run of a repro may take (a Vulkan repro starts a device: about 10 s).
TIMEOUT = 300


def _passes(path: str, env: dict[str, str]) -> bool | None:
    try:
        run = subprocess.run([sys.executable, path], env=env, capture_output=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        return None
    return run.returncode == 0


def eager_capability_variance(repro: str) -> bool:
    """Whether ``repro`` (a script from ``render_repro``) fails as run and passes when eager
    uses ATen's baseline kernels."""
    with tempfile.NamedTemporaryFile("w", suffix=".py", prefix="lazy-fuzz-variance-", delete=False) as f:
        f.write(repro)
    try:
        if _passes(f.name, dict(os.environ)) is not False:
            return False  # passes alone (or hangs): a finding that needs its group, keep it
        baseline = dict(os.environ, ATEN_CPU_CAPABILITY="default")
        return _passes(f.name, baseline) is True
    finally:
        os.unlink(f.name)
