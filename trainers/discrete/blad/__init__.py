"""BLAD (Fu et al., SC'23): snapshot groups, two processes per device, the load scheduler with its duration
predictor, the pipeline simulator and the overlap-aware operator reordering. See docs/blad.md and
../shared/papers/blad-sc23.txt."""
