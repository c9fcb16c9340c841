"""ESDG (Chakaravarthy et al., SC'21): checkpoint blocks with graph-difference transfer, snapshot and vertex
partitioning, and the vertex partitioners (partition/). See docs/discrete-schemes.md and
../shared/papers/esdg-sc21.txt."""
