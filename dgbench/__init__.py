"""dgbench: Zarr stores of dynamic graphs, distributed training schemes, and leaderboards.

The public core API is small: open a store, write one, validate it.
"""
from dgbench.store import (EdgeStreamStore, EdgeStreamStoreWriter, Snapshot, SnapshotStore,
                           SnapshotStoreWriter, open_store)

__version__ = "0.1.0"
__all__ = ["EdgeStreamStore", "EdgeStreamStoreWriter", "Snapshot", "SnapshotStore", "SnapshotStoreWriter",
           "open_store", "__version__"]
