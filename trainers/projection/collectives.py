"""What a collective costs on a two-level network: alpha-beta (Hockney) links per kind.

All-to-all (pairwise exchange, busiest port), all-gather (ring), all-reduce (the cheaper of ring and
tree) and point to point, after Thakur et al. 2005, Patarasuk & Yuan 2009 and NCCL.
See docs/projection.md (section "3. Collective cost formulas").
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Link:
    """One link kind: latency (s) and bandwidth (bytes/s), and what it is."""

    alpha_s: float
    bandwidth: float
    what: str = ""

    @property
    def beta(self) -> float:
        return 1.0 / self.bandwidth


@dataclass(frozen=True)
class Network:
    """Intra-node links per rank, one inter-node port per node."""

    intra: Link
    inter: Link
    ranks_per_node: int

    def nodes(self, world: int) -> int:
        return -(-world // self.ranks_per_node)

    def alpha(self, world: int) -> float:
        return self.inter.alpha_s if self.nodes(world) > 1 else self.intra.alpha_s

    def slowest_beta(self, world: int) -> float:
        return max(self.intra.beta, self.inter.beta) if self.nodes(world) > 1 else self.intra.beta

    def node_of(self, world: int) -> np.ndarray:
        return np.arange(world) // self.ranks_per_node


def inter_fractions(pairs: np.ndarray, network: Network) -> tuple[np.ndarray, np.ndarray]:
    """Per rank: the fraction of what it sends, and of what it receives, that crosses nodes."""
    world = len(pairs)
    node = network.node_of(world)
    crossing = node[:, None] != node[None, :]
    sent, received = pairs.sum(1), pairs.sum(0)
    out = np.divide((pairs * crossing).sum(1), sent, out=np.zeros(world), where=sent > 0)
    into = np.divide((pairs * crossing).sum(0), received, out=np.zeros(world), where=received > 0)
    return out, into


def all_to_all(sent: np.ndarray, received: np.ndarray, out_inter: np.ndarray, in_inter: np.ndarray,
               network: Network) -> float:
    """One uneven all-to-all: ``sent[r]`` / ``received[r]`` bytes of rank r, the given fractions of
    them crossing nodes (pairwise exchange, busiest port; see the module docstring)."""
    world = len(sent)
    if world <= 1:
        return 0.0
    node = network.node_of(world)
    nodes = int(node.max()) + 1
    intra = max(float((sent * (1 - out_inter)).max()), float((received * (1 - in_inter)).max())) * network.intra.beta
    inter = 0.0
    if nodes > 1:
        leaving = np.bincount(node, weights=sent * out_inter, minlength=nodes)
        arriving = np.bincount(node, weights=received * in_inter, minlength=nodes)
        inter = max(float(leaving.max()), float(arriving.max())) * network.inter.beta
    return (world - 1) * network.alpha(world) + max(intra, inter)


def all_gather(block: np.ndarray, network: Network) -> float:
    """One ring all-gather of per-rank blocks ``block[r]`` bytes."""
    world = len(block)
    if world <= 1:
        return 0.0
    return (world - 1) * (network.alpha(world) + float(block.max()) * network.slowest_beta(world))


def all_reduce(size: float, world: int, network: Network) -> float:
    """One all-reduce of ``size`` bytes per rank: the cheaper of ring and tree."""
    if world <= 1:
        return 0.0
    alpha, beta = network.alpha(world), network.slowest_beta(world)
    ring = 2 * (world - 1) * alpha + 2 * (world - 1) / world * size * beta
    tree = 2 * math.ceil(math.log2(world)) * alpha + 2 * size * beta
    return min(ring, tree)


def point_to_point(size: float, same_node: bool, network: Network) -> float:
    link = network.intra if same_node else network.inter
    return link.alpha_s + size * link.beta
