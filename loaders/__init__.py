"""Loaders: real raw dataset files -> dgbench stores. Importing registers each with `dgbench prepare`."""
from loaders import prepare  # noqa: F401  (registers `file` and the named data sets with their formats)
