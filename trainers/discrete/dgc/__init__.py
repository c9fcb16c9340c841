"""DGC (chunk-based partitioning for spatio-temporal non-uniformity): PSS and PTS baselines, PGC chunks, chunk
fusion, adaptive stale aggregation and the chunk cost model. See docs/discrete-schemes.md and
../shared/papers/dgc.txt."""
