"""Loaders: real raw dataset files -> dgbench stores. Importing registers each with `dgbench prepare`."""
