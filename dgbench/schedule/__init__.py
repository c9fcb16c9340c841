"""Schedulers that decide where and in which order work runs, independent of any trainer.

BLAD (Fu et al., SC'23): :mod:`.blad_balance` (Eq. 2's dynamic program splitting each snapshot group
between the two processes of a device, and the §5.1 group-to-device assignment), :mod:`.pipeline`
(a discrete-event simulator of the two-process pipeline of §5.2.1), :mod:`.predictor` (§5.2.2's
per-operator linear-regression duration predictor, fitted on this machine) and :mod:`.reorder`
(§6's overlap-aware topology manager: Eq. 3, Alg. 1, Eq. 4); :mod:`.table3` (§5.3 Table 3's
communication rows per partition kind, instantiated for what the harness moves).
"""
