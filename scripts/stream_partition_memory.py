"""Peak RSS of minmax-greedy's pair graph or streaming T-GCN's grid on a stream store, loaded whole or
read chunk by chunk (docs/continuous-training.md, "Streams larger than memory").

    python scripts/stream_partition_memory.py STORE {minmax,grid} {memory,streamed}

Prints one JSON line: the distinct pairs (minmax) or training events (grid) and the peak RSS (ru_maxrss)
before and after. Memory figures are valid on a loaded host; the seconds are not.
"""
from __future__ import annotations

import argparse
import json
import resource
import time

import numpy as np

from dgbench.store import EdgeStreamStore, open_store
from dgbench.trainers.continuous.data import EventStream
from dgbench.trainers.continuous.sven import formulas
from dgbench.trainers.continuous.sven.partition import training_blocks
from dgbench.trainers.continuous.tgcn.scheme import Grid, grid_positions, vertex_ranges

PARTS, BATCH, INTERVALS = 4, 200, 11


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("store")
    parser.add_argument("what", choices=("minmax", "grid"))
    parser.add_argument("source", choices=("memory", "streamed"))
    args = parser.parse_args()
    store = open_store(args.store)
    assert isinstance(store, EdgeStreamStore)
    stream = EventStream.streamed(store) if args.source == "streamed" else EventStream.from_store(store)
    before, started = peak_rss_bytes(), time.perf_counter()
    out: dict[str, object] = {"store": args.store, "what": args.what, "source": args.source,
                              "events": stream.num_events}
    if args.what == "minmax":
        graph, _, events = formulas._pair_graph_blocks(training_blocks(stream, BATCH), stream.num_nodes, PARTS, BATCH)
        out.update(distinct_pairs=len(graph.neighbors) // 2, training_events=events)
    else:
        a, b = stream.ranges["train"]
        grid = Grid.cut(stream, np.arange(a, b, dtype=np.int64), vertex_ranges(stream.num_nodes, PARTS), INTERVALS,
                        "width", grid_positions(stream.num_nodes, "permuted"))
        out.update(training_events=grid.events)
    out.update(seconds_loaded_host=round(time.perf_counter() - started, 1), rss_before_bytes=before,
               peak_rss_bytes=peak_rss_bytes())
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
