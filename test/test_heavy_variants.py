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


def test_generate_lists_costly_second_backends_with_an_iree_cpu_twin(tmp_path) -> None:
    cases = [
        ("f", "reference-dtype0", 9.0), ("f", "iree-cpu-dtype0", 9.0),  # listed
        ("f", "reference-dtype1", 1.0), ("f", "iree-cpu-dtype1", 9.0),  # too cheap
        ("g", "reference", 9.0),                                          # no iree-cpu twin
        ("h", "dtype0-iree-vulkan", 9.0), ("h", "dtype0-iree-cpu", 1.0),  # listed
        ("vk", "iree-vulkan", 9.0), ("vk", "iree-cpu", 1.0),              # names its target
    ]
    xml = tmp_path / "run.xml"
    xml.write_text("<testsuites><testsuite>" + "".join(
        f'<testcase classname="test.test_heavy_variants" name="{f}[{p}]" time="{t}"/>' for f, p, t in cases)
        + "</testsuite></testsuites>")
    (tmp_path / "test").mkdir()
    source = tmp_path / "test" / "test_heavy_variants.py"
    source.write_text("def f(): pass\ndef g(): pass\ndef h(): pass\ndef vk():\n    '''lavapipe bug'''\n")
    assert hv.generate(str(xml), root=str(tmp_path)) == [
        "test/test_heavy_variants.py::f[reference-dtype0]",
        "test/test_heavy_variants.py::h[dtype0-iree-vulkan]",
    ]
