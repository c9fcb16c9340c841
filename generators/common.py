"""What every generator shares: per-snapshot seeding and provenance records."""
from __future__ import annotations

from typing import Any

import numpy as np

import dgbench


def snapshot_rngs(seed: int, count: int) -> list[np.random.Generator]:
    """One independent generator per snapshot, so snapshot t does not depend on how t-1 was drawn."""
    return [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(count)]


def generator_provenance(name: str, **params: Any) -> dict[str, Any]:
    return {"source": "generator", "generator": name, "params": params, "loader": f"generators.{name}",
            "dgbench_version": dgbench.__version__, "transforms": []}
