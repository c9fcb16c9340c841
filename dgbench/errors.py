"""Errors dgbench reports to users as one clear line (the CLI prints them without a traceback)."""
from __future__ import annotations

from pathlib import Path


class DgbenchError(Exception):
    """A user-facing error: the message is complete and printed as one line."""


class InputError(DgbenchError):
    """Malformed raw input: names the file, the line (1-based) and the field."""

    def __init__(self, file: str | Path, problem: str, line: int | None = None, field: str | None = None):
        self.file, self.line, self.field, self.problem = str(file), line, field, problem
        where = self.file if line is None else f"{self.file}:{line}"
        what = problem if field is None else f"field '{field}': {problem}"
        super().__init__(f"{where}: {what}")


class StoreError(DgbenchError):
    """A store that is missing, of the wrong kind, or corrupt."""
