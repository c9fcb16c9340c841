"""Leaderboards: check, keep and show result records (`dgbench submit`, `leaderboard`, `compare`).

schema.py checks a record against its versioned schema; tracks.py holds each track's rules;
board.py stores accepted records by content hash and reads a board back; figures.py reduces a
record to the figures tables show; tables.py builds the tables every format renders; render.py
writes them as Markdown, JSON or a self-contained HTML page with plots from plots.py; compare.py
puts runs side by side. Nothing here executes or unpickles anything from a record: records are
plain JSON and are read as such.
"""
