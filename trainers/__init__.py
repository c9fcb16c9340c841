"""Trainers: the distributed schemes. Importing registers each scheme and model with the CLI."""
