"""Loaders: real raw dataset files -> dgbench stores. Importing registers each with `dgbench prepare`."""
# format families (register with dgbench.loaders.formats), then the `file` preparer and the named data sets
from dgbench.loaders import amlsim, edgelists, jodie, tgl  # noqa: F401  (registration)
from dgbench.loaders import catalogue, prepare, tgb  # noqa: F401  (registration)
