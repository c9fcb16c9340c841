"""Streaming T-GCN (Wang et al.): the SIS/ITS/BRS samplers (sampling/), DyGNN's grid scheme and its swap
schedule. See docs/tgcn-streaming.md and ../shared/papers/tgcn-streaming.txt."""
