"""Which folders become which installed packages (the rest is in pyproject.toml).

The repository keeps ``backends/``, ``lowering/``, ``tools/`` and ``test/`` at
its top level; the wheel installs them under the ``lazy_mlir`` namespace
(``lazy_mlir/__init__.py`` explains why). pyproject.toml cannot map folders
to other package names together with discovering their subpackages, so this
file does both: a subpackage added to any of these folders (``tools/fuzz``)
ships without editing a list.
"""

from setuptools import find_packages, setup

#: repository folder -> installed package
MAPPED = {
    "backends": "lazy_mlir.backends",
    "lowering": "lazy_mlir.lowering",
    "tools": "lazy_mlir.tools",
    "test": "lazy_mlir.tests",  # plain modules (no subpackages): lazy-mlir-test-backend runs them
}

package_dir = {"lazy_core": "lazy_core", "lazy_mlir": "lazy_mlir"}
packages = ["lazy_core", *(f"lazy_core.{p}" for p in find_packages("lazy_core")), "lazy_mlir"]
for folder, name in MAPPED.items():
    package_dir[name] = folder
    packages.append(name)
    if folder != "test":
        packages += [f"{name}.{p}" for p in find_packages(folder)]

# The Vulkan layer's C source is built on first use (backends/iree/vulkan_layer.py); the tests'
# heavy-variant list is read by their conftest plugin (test/heavy_variants.py).
setup(package_dir=package_dir, packages=packages,
      package_data={"lazy_mlir.backends.iree": ["*.c"], "lazy_mlir.tests": ["heavy_variants.txt"]})
