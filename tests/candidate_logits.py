"""The reference both evaluation-sharing tests score against: an evaluation batch's (1 + K) candidate
logits the straightforward way, from every root's embedding, one predictor call per candidate block."""
from __future__ import annotations

import numpy as np
import torch


def logits_one_block_at_a_time(predictor, h: torch.Tensor, plan) -> np.ndarray:
    """[events, 1 + K] logits from ``h``, the embeddings of ``plan.roots`` in their order ([src, dst,
    negative sources unless the source is fixed, negative destinations]), each block with its own sources."""
    b, k = len(plan.events), plan.candidates
    sources = [h[:b]] * k if plan.fixed_source else [h[(2 + j) * b:(3 + j) * b] for j in range(k)]
    first_dst = 2 if plan.fixed_source else 2 + k
    logits = [predictor(h[:b], h[b:2 * b])]
    logits += [predictor(sources[j], h[(first_dst + j) * b:(first_dst + j + 1) * b]) for j in range(k)]
    return torch.stack(logits, dim=1).double().numpy()
