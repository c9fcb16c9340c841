"""Peak RSS of planning a stream's training batches (no model): the stream source, the sampler and the
prefetched plans TGN's loop reads (docs/continuous-training.md, "Streams larger than memory").

    python scripts/stream_plan_memory.py STORE [--streamed] [--batches N] [--batch-size 600] [--neighbors 10]

Prints one JSON line: the source, events planned, bytes read, the sampler's state bytes, the peak RSS
(ru_maxrss) before planning (after the stream's setup passes) and after; run under /usr/bin/time -v for
the process's own figure. Memory figures are valid on a loaded host; the seconds are not.
"""
from __future__ import annotations

import argparse
import json
import resource
import time

import numpy as np

from dgbench.store import EdgeStreamStore, open_store
from dgbench.trainers.continuous.data import BatchPlanner, EventStream, Prefetcher, gap_statistics, neighbor_sampler


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("store")
    parser.add_argument("--streamed", action="store_true")
    parser.add_argument("--batches", type=int, default=None)
    parser.add_argument("--batch-size", type=int, default=600)
    parser.add_argument("--neighbors", type=int, default=10)
    args = parser.parse_args()
    store = open_store(args.store)
    assert isinstance(store, EdgeStreamStore)
    started = time.perf_counter()
    stream = EventStream.streamed(store) if args.streamed else EventStream.from_store(store)
    gap_statistics(stream)  # the trainer's setup pass
    sampler = neighbor_sampler(stream, "recent", args.neighbors)
    planner = BatchPlanner(stream, sampler, args.neighbors, "recent", 0, lambda src: np.ones(len(src), dtype=bool),
                           lambda ids: None, max_batches=args.batches)
    setup_rss, setup_s = peak_rss_bytes(), time.perf_counter() - started
    events = 0
    for plan in Prefetcher(planner, "train", args.batch_size):
        events += plan.size
    print(json.dumps({"store_events": store.num_events, "source": stream.source, "events_planned": events,
                      "bytes_read": stream.reads.bytes_read if stream.reads else None,
                      "sampler_state_bytes": getattr(sampler, "nbytes", None),
                      "setup_peak_rss_bytes": setup_rss, "peak_rss_bytes": peak_rss_bytes(),
                      "setup_s_loaded_host": round(setup_s, 1),
                      "plan_s_loaded_host": round(time.perf_counter() - started - setup_s, 1)}))


if __name__ == "__main__":
    main()
