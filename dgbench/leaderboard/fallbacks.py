"""Runs that silently used a weaker method than the one their scheme names do not rank officially.

The `vertex` scheme's ``--partition auto`` runs the hypergraph partitioner ESDG §4.1 uses when it is
installed and falls back to METIS or ranges otherwise (trainers/discrete/partition/partitioners.py);
its hyper-parameters then read the same on every machine while the partitions differ, so such a
record is filed but not ranked officially (docs/discrete-schemes.md).
"""
from __future__ import annotations

from typing import Any


def fallback_partitioner_reason(record: dict[str, Any]) -> str | None:
    """Why ``record`` may not rank officially because its partitioner fell back (None: it did not)."""
    partition = (record.get("extra") or {}).get("partition")
    if not isinstance(partition, dict) or not partition.get("fallback"):
        return None
    return (f"partitioner fell back: '{partition.get('requested', 'auto')}' ran '{partition.get('method')}' "
            "because the hypergraph partitioner is not installed (pip install 'dgbench[partition]')")
