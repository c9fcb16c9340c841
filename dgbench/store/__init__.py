"""The two Zarr store kinds every dgbench part meets: their format and fingerprints (format.py), the checks of
what code relies on (checks.py), atomic replacement (replace.py), streaming writers (write.py) and verified
reading (read.py). See docs/store-format.md."""
from dgbench.store.checks import (ARRAY_NAME, attribute_problems, declared_fingerprint_problem, memory_problem,
                                  offsets_problem)
from dgbench.store.format import (EDGE_COLUMNS, FILE_DIGEST_CHARS, METADATA_ARRAYS, REQUIRED_ARRAYS, SCHEMA_NAMES,
                                  SCHEMA_VERSION, SNAPSHOTS, STREAM, array_digest_update, combine_fingerprint,
                                  file_digest, fingerprint_header, id_dtype, store_files)
from dgbench.store.read import (METADATA_LIMIT, EdgeStreamStore, Snapshot, SnapshotStore, open_store, read_attrs,
                                read_store_file, safe_local_store)
from dgbench.store.replace import check_replaceable, not_a_store, recover_interrupted_replacement, rename_no_replace
from dgbench.store.write import CHUNK_ELEMENTS, COMPRESSOR, EdgeStreamStoreWriter, SnapshotStoreWriter

__all__ = ["ARRAY_NAME", "CHUNK_ELEMENTS", "COMPRESSOR", "EDGE_COLUMNS", "FILE_DIGEST_CHARS", "METADATA_ARRAYS",
           "METADATA_LIMIT", "REQUIRED_ARRAYS", "SCHEMA_NAMES", "SCHEMA_VERSION", "SNAPSHOTS", "STREAM",
           "EdgeStreamStore", "EdgeStreamStoreWriter", "Snapshot", "SnapshotStore", "SnapshotStoreWriter",
           "array_digest_update", "attribute_problems", "check_replaceable", "combine_fingerprint",
           "declared_fingerprint_problem", "file_digest", "fingerprint_header", "id_dtype", "memory_problem",
           "not_a_store", "offsets_problem", "open_store", "read_attrs", "read_store_file",
           "recover_interrupted_replacement", "rename_no_replace", "safe_local_store", "store_files"]
