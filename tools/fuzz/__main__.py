"""``python -m tools.fuzz``: the command line of the differential fuzzer (see the package doc).

Environment defaults (the Makefile's ``fuzz`` target sets them):
``FUZZ_PROGRAMS`` programs per seed and backend, ``FUZZ_SEEDS`` a count or a
comma-separated list, ``FUZZ_BACKENDS``, ``FUZZ_SKIP`` categories to leave out,
``FUZZ_STATEFUL=1`` multi-step stateful programs (``--stateful``, tools/fuzz/stateful.py),
``FUZZ_DEFAULT_DTYPE`` the default dtype programs run under (``--default-dtype``).
Exit status 1 if any backend disagreed with eager PyTorch.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import warnings

import torch

from . import CATEGORIES, DEFAULT_DTYPES, Config, fuzz, set_default_dtype, under_default_dtype
from .driver import host_eval_setting


def _seeds(text: str) -> list[int]:
    """``3`` is seeds 0, 1, 2; ``7,`` or ``7,9`` are those seeds."""
    if "," in text:
        return [int(s) for s in text.split(",") if s.strip()]
    if int(text) < 1:
        raise SystemExit(f"--seeds {text}: a count of at least 1, or a list such as '{text},'")
    return list(range(int(text)))


def _available(name: str) -> str | None:
    import lazy_core

    try:
        backend = lazy_core.create_backend(name)
        check = getattr(backend, "unavailable_reason", None)
        return check() if check else None
    except Exception as e:
        return f"{type(e).__name__}: {e}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.fuzz", description=__doc__.splitlines()[0])
    p.add_argument("--backends", default=os.environ.get("FUZZ_BACKENDS", "eager,reference,iree-cpu,iree-vulkan"))
    p.add_argument("--programs", type=int, default=int(os.environ.get("FUZZ_PROGRAMS", "200")))
    p.add_argument("--seeds", default=os.environ.get("FUZZ_SEEDS", "1"),
                   help="a count N (seeds 0..N-1), or a comma-separated list ('7,' is seed 7)")
    p.add_argument("--skip", default=os.environ.get("FUZZ_SKIP", ""),
                   help=f"categories to leave out, of: {', '.join(CATEGORIES)}")
    p.add_argument("--only", default="", help="run only these categories (plus inputs)")
    p.add_argument("--batch", type=int, default=int(os.environ.get("FUZZ_BATCH", "8")))
    p.add_argument("--no-twins", action="store_true")
    p.add_argument("--stateful", action="store_true", default=bool(os.environ.get("FUZZ_STATEFUL")),
                   help="multi-step programs that update state in place (tools/fuzz/stateful.py); "
                        "--only/--skip pick the ops their steps compute with")
    p.add_argument("--no-shrink", action="store_true")
    p.add_argument("--max-failures", type=int, default=5)
    p.add_argument("--repro-dir", default=os.environ.get("FUZZ_REPRO_DIR", "fuzz-repros"))
    p.add_argument("--group-timeout", type=float, default=float(os.environ.get("FUZZ_GROUP_TIMEOUT", "600")),
                   help="seconds one group of programs may take before it counts as a hang (0: none)")
    p.add_argument("--in-process", action="store_true",
                   help="run here, not one child process per backend and seed (a crash then ends the run)")
    p.add_argument("--default-dtype", choices=DEFAULT_DTYPES, default=os.environ.get("FUZZ_DEFAULT_DTYPE") or None,
                   help="run every program under torch.set_default_dtype(this): integer operands then "
                        "promote to it (under bfloat16 and float16 this found wrong values, 2026-12-07)")
    args = p.parse_args(argv)
    if args.default_dtype:
        # In the environment too: the child processes (and a crash's shrinking) inherit it.
        os.environ["FUZZ_DEFAULT_DTYPE"] = args.default_dtype
        set_default_dtype()

    cats = set(CATEGORIES)
    if args.only:
        cats = {c.strip() for c in args.only.split(",")} | {"input"}
    cats -= {c.strip() for c in args.skip.split(",") if c.strip()}
    unknown = cats - set(CATEGORIES) - {"input"}
    if unknown:
        p.error(f"unknown categories {sorted(unknown)}; known: {', '.join(CATEGORIES)}")
    warnings.simplefilter("ignore")  # compile fallbacks are counted and reported below
    os.makedirs(args.repro_dir, exist_ok=True)
    failed = 0
    seeds = _seeds(args.seeds)
    if "," not in args.seeds:  # a count: say so, one seed N is written 'N,'
        print(f"[fuzz] --seeds {args.seeds}: seeds 0..{len(seeds) - 1} (for seed {args.seeds} alone: "
              f"--seeds {args.seeds},)", flush=True)
    for backend in [b.strip() for b in args.backends.split(",") if b.strip()]:
        reason = _available(backend)
        if reason:
            print(f"[fuzz] {backend}: skipped ({reason.splitlines()[0][:120]})")
            continue
        for seed in seeds:
            last = os.path.join(args.repro_dir, f"last-{backend}-seed{seed}.json")
            if not args.in_process:
                failed += _child(argv if argv is not None else sys.argv[1:], backend, seed, last, args.repro_dir)
                continue
            config = Config(backend=backend, seed=seed, programs=args.programs, categories=cats,
                            batch=args.batch, twins=not args.no_twins, shrink=not args.no_shrink,
                            max_failures=args.max_failures,
                            last_path=last, group_timeout=args.group_timeout, stateful=args.stateful)
            dtype = torch.get_default_dtype()
            print(f"[fuzz] {backend} seed {seed}: {args.programs} {'stateful ' * args.stateful}programs, "
                  f"LAZY_HOST_EVAL={host_eval_setting(config)}, "
                  f"{f'default dtype {dtype}, ' if dtype != torch.float32 else ''}"
                  f"categories {','.join(sorted(cats))}", flush=True)
            report = fuzz(config)
            fallbacks = sum(v for k, v in report.counters.items() if k.startswith("fallback::"))
            print(f"[fuzz] {backend} seed {seed}: {report.programs} programs in {report.seconds:.1f}s "
                  f"({report.rate:.1f} programs/s), {len(report.failures)} mismatches, "
                  f"{report.counters.get('compile', 0)} compiles, {fallbacks} fallbacks, "
                  f"{report.counters.get('host_eval', 0)} graphs on the host, "
                  f"{report.counters.get('iree_donating_graphs', 0)} donating IREE executables, "
                  f"{len(report.eager_variances)} equal to eager on other CPU kernels", flush=True)
            if fallbacks:  # which ops ran eagerly, most frequent first
                named = sorted(((v, k.split("::", 1)[1]) for k, v in report.counters.items()
                                if k.startswith("fallback::")), reverse=True)
                # A compile error's cause, where a backend refused the graph (iree_refused_*).
                named += sorted(((v, k) for k, v in report.counters.items() if k.startswith("iree_refused_")),
                                reverse=True)
                print(f"[fuzz] {backend} seed {seed}: fallbacks " + ", ".join(f"{k} {v}" for v, k in named),
                      flush=True)
            for i, f in enumerate(report.failures):
                failed += 1
                path = os.path.join(args.repro_dir, f"{backend}-seed{seed}-{i}.py")
                repro = under_default_dtype(f.repro)
                with open(path, "w") as out:
                    out.write(repro)
                print(f"--- mismatch {i} ({'shrunk' if f.shrunk else 'not shrunk'}), repro {path}:\n{repro}")
    return 1 if failed else 0


def _child(argv: list[str], backend: str, seed: int, last: str, repro_dir: str) -> int:
    """Run one backend and seed in a child process; shrink the case if the child dies. Failures."""
    from .crash import died, shrink_crash
    from .driver import HANG_SIGNAL

    cmd = [sys.executable, "-m", "lazy_mlir.tools.fuzz", *argv, "--backends", backend, "--seeds", f"{seed},",
           "--in-process"]
    status = subprocess.run(cmd).returncode
    if status == 0:
        return 0
    if status == -HANG_SIGNAL:
        print(f"[fuzz] {backend} seed {seed}: a group HUNG; its case is {last} "
              "(replay: python -m tools.fuzz.crash --replay CASE)", flush=True)
        return 1
    if not died(status):
        return 1
    print(f"[fuzz] {backend} seed {seed}: the process DIED (exit status {status}); shrinking {last} "
          "in child processes", flush=True)
    message, repro = shrink_crash(last)
    repro = under_default_dtype(repro)
    path = os.path.join(repro_dir, f"{backend}-seed{seed}-crash.py")
    with open(path, "w") as out:
        out.write(repro)
    print(f"--- crash ({message}), repro {path}:\n{repro}", flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(main())
