"""Validation / test AP of the PyG TGN peer's three forms (``example``, ``fixed``, ``paper``) and of dgbench's
TGN under ``--protocol batch``, per seed, on the first events of a real stream (docs/performance.md "Peers",
"Where the peer's AP gap came from": the first, second, last-but-one and last rows of the table, and the
50k and per-epoch figures below it). The forms are ``benchmarks/_pyg_tgn_peer.py``'s, run through the
benchmark's ``peer_tgn`` / ``ours_tgn`` (one epoch) or ``peer_epochs`` / ``ours_epochs`` (validation AP after
each of ``--epochs``). AP only, so a loaded host is fine. Needs the ``peers`` extra (``make peers``) and the
real data folder.

    PYTHONPATH=$PWD .venv/bin/python scripts/peer_tgn_forms.py --dataset wikipedia --events 10000 --seeds 0,1,2
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))  # the peer and the benchmarks' real-store builder live there


def default_data() -> Path:
    """$DGBENCH_SHARED_DATA, else ``../shared/data`` beside the repository (as the tests find it)."""
    return Path(os.environ.get("DGBENCH_SHARED_DATA", ROOT.parent / "shared" / "data"))


def common_arguments(description: str) -> argparse.ArgumentParser:
    """The options both peer scripts take: where the data is, which stream, how much of it, the seeds."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--data", type=Path, default=default_data(),
                        help="real data folder (default: $DGBENCH_SHARED_DATA or ../shared/data)")
    parser.add_argument("--work", type=Path, default=None,
                        help="scratch folder for the prepared store, kept for the next run "
                             "(default: a temporary folder, removed at the end)")
    parser.add_argument("--dataset", default="wikipedia", choices=("wikipedia", "lastfm"))
    parser.add_argument("--events", type=int, default=10000, help="first events of the stream (0 = all)")
    parser.add_argument("--seeds", default="0", help="comma list of seeds")
    parser.add_argument("--memory", type=int, default=100, help="memory / embedding width M")
    parser.add_argument("--epochs", type=int, default=1,
                        help="training epochs; validation AP is printed after each")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads (the benchmark's 1)")
    return parser


@contextmanager
def prepared_store(args: argparse.Namespace) -> Iterator[Path]:
    """The stream store of ``args.dataset`` built (once) by the benchmarks' ``real_store`` in ``args.work``."""
    import torch  # noqa: PLC0415 - after the argument parsing, so --help is quick
    from test_continuous_bench import real_store  # noqa: PLC0415 - benchmarks/ is on the path above
    torch.set_num_threads(args.threads)
    if not args.data.is_dir():
        sys.exit(f"real data folder {args.data} is absent (--data or DGBENCH_SHARED_DATA)")
    if args.work is not None:
        args.work.mkdir(parents=True, exist_ok=True)
        yield real_store(args.data, args.dataset, args.work)
        return
    with tempfile.TemporaryDirectory(prefix="dgbench-peer-") as work:
        yield real_store(args.data, args.dataset, Path(work))


def seeds(text: str) -> list[int]:
    return [int(seed) for seed in text.split(",")]


def main() -> None:
    parser = common_arguments(__doc__.split("\n\n")[0])
    parser.add_argument("--sides", default="example,fixed,paper,dgbench",
                        help="comma list of peer forms and/or 'dgbench' (--protocol batch)")
    args = parser.parse_args()
    os.environ.setdefault("DGBENCH_QUIET", "1")  # the AP lines only, no progress bars
    from test_peer_tgn import ours_epochs, ours_tgn, peer_epochs, peer_tgn  # noqa: PLC0415 - needs the path
    events = args.events or None
    with prepared_store(args) as store:
        for seed in seeds(args.seeds):
            for side in args.sides.split(","):
                label = f"{args.dataset} {args.events} seed {seed} {side:8s}"
                if args.epochs == 1:
                    run = (ours_tgn(store, args.memory, events, seed=seed, protocol="batch") if side == "dgbench"
                           else peer_tgn(store, args.memory, events, seed=seed, form=side))
                    print(f"{label} val {run['val_ap']:.4f} test {run['test_ap']:.4f}", flush=True)
                else:
                    curve = (ours_epochs(store, args.memory, events, args.epochs, "batch", seed=seed)
                             if side == "dgbench" else
                             peer_epochs(store, args.memory, events, args.epochs, seed=seed, form=side))
                    print(f"{label} val per epoch {[round(ap, 4) for _, ap in curve]}", flush=True)


if __name__ == "__main__":
    main()
