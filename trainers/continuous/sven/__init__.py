"""Sven (TPDS manuscript of HPDC'23) and its baselines DepCache and DepComm: the N&M placements' formulas (Eq. 1,
5-13), the partitioners (Re-FlexBiCut, interval, range) and the three schemes. See docs/continuous-training.md and
../shared/papers/sven-tpds.txt."""
