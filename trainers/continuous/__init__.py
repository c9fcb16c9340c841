"""Continuous-time (memory-based TGNN) trainers: schemes single / depcache / depcomm / sven and the
models tgn / jodie / apan, registered with the CLI on import. See loop.py for the training protocol."""
from __future__ import annotations

from dgbench.registry import register_model, register_scheme

SCHEME_SUMMARIES = {
    "single": "One process, node memory and mailbox resident (TGL protocol)",
    "depcache": "Full N&M replica per rank; updated rows broadcast after each batch",
    "depcomm": "N&M partitioned by vertex; fetch and write-back by all-to-all",
    "sven": "Sven: redundancy-free all-to-alls, Re-FlexBiCut partition, prefetch, pipelining",
}
MODEL_SUMMARIES = {
    "tgn": "TGN: GRU memory + temporal attention over sampled neighbours",
    "jodie": "JODIE: RNN memory + time-projection embedding",
    "apan": "APAN: LSTM memory + attention over a 10-slot mailbox",
}


def _experiment(*args, **kwargs):
    from trainers.continuous.experiment import run_experiment
    return run_experiment(*args, **kwargs)


for _name, _summary in SCHEME_SUMMARIES.items():
    register_scheme(_name, family="continuous", summary=_summary)(_experiment)
for _name, _summary in MODEL_SUMMARIES.items():
    register_model(_name, family="continuous", summary=_summary)(_name)
