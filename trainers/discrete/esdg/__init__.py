"""ESDG (Chakaravarthy et al., SC'21): the checkpoint, snapshot and vertex schemes (the family's time and vertex
placements and vertex partitioners, shared with DGC and BLAD, are one level up). See docs/discrete-schemes.md and
../shared/papers/esdg-sc21.txt."""
