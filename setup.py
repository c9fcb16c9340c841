"""The package layout, computed (docs/packaging.md); everything else is in pyproject.toml.

The repository keeps its top-level folders loaders/, generators/ and trainers/; the wheel installs them as
dgbench.loaders, dgbench.generators and dgbench.trainers (package-dir mapping), so site-packages holds only
dgbench. Listed here rather than in pyproject.toml because the sub-packages are found, not enumerated.
"""
from setuptools import find_packages, setup

FOLDERS = ("loaders", "generators", "trainers")

packages = find_packages(include=["dgbench", "dgbench.*"])
package_dir = {}
for folder in FOLDERS:
    package_dir[f"dgbench.{folder}"] = folder
    packages += [f"dgbench.{name}" for name in find_packages(include=[folder, f"{folder}.*"])]

setup(packages=packages, package_dir=package_dir)
