"""Peak-memory probes shared by the benchmarks: a dgbench command run in a fresh interpreter that prints,
as its last stdout line, its wall seconds and its high-water RSS (VmHWM), checked against 24 GiB (the
memory the issues' scale checks allow)."""
from __future__ import annotations

LIMIT_BYTES = 24 * 2 ** 30

PROBE = """
import json, sys, time
from dgbench.cli import cli
from dgbench.memory import peak_rss_bytes
start = time.perf_counter()
try:
    cli.main(args=sys.argv[1:], standalone_mode=False)
finally:
    print(json.dumps({"seconds": time.perf_counter() - start, "peak_rss_bytes": peak_rss_bytes()}))
"""
