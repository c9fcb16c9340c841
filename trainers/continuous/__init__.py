"""Continuous-time (memory-based TGNN) trainers: importing registers the schemes (trainers/continuous/schemes/)
and the models (dgbench.models.temporal) with the CLI. See loop.py for the training protocol."""
import dgbench.models.edgebank  # noqa: F401  (registers the edgebank baseline)
import dgbench.models.dygnn  # noqa: F401  (registers dygnn)
import dgbench.models.temporal  # noqa: F401  (registers tgn, jodie, apan)
from trainers.continuous import schemes  # noqa: F401  (registers the schemes)
