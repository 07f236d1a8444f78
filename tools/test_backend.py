"""``lazy-mlir-test-backend NAME``: run lazy-mlir's backend-generic tests on one backend.

For vendors. After ``pip install lazy-mlir pytest`` and your backend's
package (a ``lazy_core.backends`` entry point), this one command runs the
project's own tests on your backend: the lazy-tensor semantics, training
with SGD/Adam/AdamW and common losses, each compared with eager PyTorch on
the CPU (``--opinfo`` adds PyTorch's OpInfo samples). It works the same from
a source checkout and from an installed wheel, which ships these tests.

The run sets ``LAZY_TEST_BACKENDS=NAME`` (the ``backend`` fixture runs
each generic test on your backend) and ``LAZY_REQUIRE_BACKENDS=NAME``, so a
backend that cannot run here fails the run instead of skipping every test.
``--strict`` sets ``LAZY_STRICT=1``: a graph your backend cannot compile
fails instead of running eagerly. Other arguments go to pytest.
"""

from __future__ import annotations

import argparse
import os
import sys

#: The test files that exercise a backend through the ``backend`` fixture.
GENERIC_TESTS = ["test_semantics.py", "test_training.py", "test_losses.py"]
OPINFO_TESTS = ["test_opinfo.py"]


def tests_dir() -> str:
    """The project's test folder: ``test/`` in a source checkout, ``tests/`` in the wheel."""
    parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for name in ("test", "tests"):
        path = os.path.join(parent, name)
        if os.path.isfile(os.path.join(path, "conftest.py")):
            return path
    raise FileNotFoundError(f"lazy-mlir's tests are not next to {parent} (neither test/ nor tests/)")


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(
        prog="lazy-mlir-test-backend",
        description="Run lazy-mlir's backend-generic tests (semantics, training, losses; "
        "each against eager PyTorch on the CPU) on one backend.",
        epilog="Unknown arguments are passed to pytest, e.g. -x, -v, -k training.",
    )
    parser.add_argument("backend", help="backend name, as lazy_core.available_backends() lists it")
    parser.add_argument("--opinfo", action="store_true", help="also run PyTorch's OpInfo samples (slow)")
    parser.add_argument("--strict", action="store_true",
                        help="LAZY_STRICT=1: a graph that fails to compile fails its test")
    return parser.parse_known_args(argv)


def main(argv: list[str] | None = None) -> int:
    args, pytest_args = parse_args(argv)
    try:
        import pytest
    except ImportError:
        print("lazy-mlir-test-backend needs pytest: pip install pytest", file=sys.stderr)
        return 2
    import lazy_core

    if args.backend not in lazy_core.available_backends():
        print(f"unknown backend {args.backend!r}; installed: {', '.join(lazy_core.available_backends())}",
              file=sys.stderr)
        return 2
    here = tests_dir()
    os.environ["LAZY_TEST_BACKENDS"] = args.backend
    os.environ["LAZY_REQUIRE_BACKENDS"] = args.backend
    if args.strict:
        os.environ["LAZY_STRICT"] = "1"
    files = [os.path.join(here, f) for f in GENERIC_TESTS + (OPINFO_TESTS if args.opinfo else [])]
    # The tests' own folder is the root: no ini file of the caller's project applies.
    return int(pytest.main(["-p", "no:cacheprovider", "--rootdir", here, *files, *pytest_args]))


if __name__ == "__main__":
    sys.exit(main())
