"""The CI budget's heavy-variant rule (test/heavy_variants.py) on node ids pytest really makes.

Its first version matched a backend only as a whole parameter, so every variant with more
parameters (``[reference-dtype0]``, ``[dtype1-iree-vulkan]``, ``[reference-Phimoe]``) was
neither listed nor checked for staleness, and the costliest variants stayed in CI.
"""

from __future__ import annotations

import heavy_variants as hv


def test_a_backend_is_found_among_joined_parameters() -> None:
    assert hv._function_and_backend("test/a.py::f[reference-dtype0]") == ("test/a.py::f", "reference")
    assert hv._function_and_backend("test/a.py::f[dtype1-iree-vulkan]") == ("test/a.py::f", "iree-vulkan")
    assert hv._function_and_backend("test/a.py::f[iree-cpu-Mixtral]") == ("test/a.py::f", "iree-cpu")
    assert hv._function_and_backend("test/a.py::f[iree-cpu]") == ("test/a.py::f", "iree-cpu")
    assert hv._function_and_backend("test/a.py::f[torch.int64]") == ("test/a.py::f", None)
    assert hv._function_and_backend("test/a.py::f") == ("test/a.py::f", None)


def _report(tmp_path, cases: list[tuple[str, str, float]], sources: str) -> str:
    xml = tmp_path / "run.xml"
    xml.write_text("<testsuites><testsuite>" + "".join(
        f'<testcase classname="test.test_heavy_variants" name="{f}[{p}]" time="{t}"/>' for f, p, t in cases)
        + "</testsuite></testsuites>")
    (tmp_path / "test").mkdir()
    (tmp_path / "test" / "test_heavy_variants.py").write_text(sources)
    return str(xml)


def test_generate_lists_costly_second_backends_with_a_twin_that_stays(tmp_path) -> None:
    cases = [
        ("f", "reference-dtype0", 9.0), ("f", "iree-cpu-dtype0", 9.0),    # reference listed
        ("f", "reference-dtype1", 0.5), ("f", "iree-cpu-dtype1", 9.0),    # too cheap
        ("g", "reference", 9.0),                                            # no twin: the coverage
        ("h", "dtype0-iree-vulkan", 9.0), ("h", "dtype0-iree-cpu", 1.0),    # vulkan listed
        ("vk", "iree-vulkan", 9.0), ("vk", "iree-cpu", 1.0),                # names its target
        ("c", "reference", 3.0), ("c", "iree-cpu", 40.0),                   # iree-cpu listed, reference kept
        ("c", "iree-vulkan", 30.0),                                         # vulkan listed (reference stays)
        ("i", "reference", 3.0), ("i", "iree-cpu", 14.0),                   # names IREE: reference listed
        ("s", "reference", 14.5), ("s", "iree-cpu", 12.0),                  # reference dearer: it is listed
        ("x", "iree-cpu", 16.0), ("y", "iree-cpu", 14.0),                   # over CAP with no twin: listed
    ]
    sources = ('def f(): pass\ndef g(): pass\ndef h(): pass\ndef vk():\n    """lavapipe bug"""\n'
               'def c(): pass\ndef i():\n    """an IREE 3.13 miscompile"""\ndef s(): pass\ndef x(): pass\n'
               'def y(): pass\n')
    xml = _report(tmp_path, cases, sources)
    assert hv.generate(xml, root=str(tmp_path)) == [f"test/test_heavy_variants.py::{n}" for n in (
        "c[iree-cpu]", "c[iree-vulkan]", "f[reference-dtype0]", "h[dtype0-iree-vulkan]", "i[reference]",
        "s[reference]", "x[iree-cpu]")]


def test_generate_keeps_listed_variants_the_run_left_out(tmp_path) -> None:
    xml = _report(tmp_path, [("f", "iree-cpu", 1.0), ("f", "reference", 0.5)], "def f(): pass\n")
    before = {"test/test_heavy_variants.py::f[iree-vulkan]", "test/test_heavy_variants.py::f[reference]"}
    # f[reference] ran (and is cheap): no longer listed; f[iree-vulkan] did not run: still listed.
    assert hv.generate(xml, root=str(tmp_path), previous=before) == ["test/test_heavy_variants.py::f[iree-vulkan]"]


def test_generate_keeps_end_to_end_files_however_long(tmp_path) -> None:
    xml = tmp_path / "run.xml"
    xml.write_text('<testsuites><testsuite><testcase classname="test.test_examples" name="bert[iree-cpu]" '
                   'time="90.0"/><testcase classname="test.test_linalg" name="solve[iree-cpu]" time="90.0"/>'
                   "</testsuite></testsuites>")
    (tmp_path / "test").mkdir()
    for name in ("test_examples", "test_linalg"):
        (tmp_path / "test" / f"{name}.py").write_text("def bert(): pass\ndef solve(): pass\n")
    assert hv.generate(str(xml), root=str(tmp_path)) == ["test/test_linalg.py::solve[iree-cpu]"]
