"""Attention flow (Abnar & Zuidema 2020): how much of position k's input can reach position q's state after layer
T, when each layer's fused map is a network of pipes.

    graph     one node per position per level (level 0: the input, level l + 1: after layer l); an edge from
              (l + 1, q) down to (l, k) with capacity A_l[q, k], A_l = rownorm(fuse_h weights_l + I) as rollout
              fuses it (without the residual identity: rownorm(fuse_h weights_l))
    flow_T    F_T[q, k] = the maximum flow from (T + 1, q) to (0, k), each row then divided by its sum, so a row
              reads as shares the way a rollout row does (a row with no flow stays 0)

Rollout multiplies the maps, so it adds up every path; flow takes the bottleneck, so a key that one strong path
reaches scores high even when many weak paths would add up elsewhere. After layer 0 both are A_0 itself. Flow is
a max-flow per (query, key) pair: short inputs only (FLOW_MAX_TOKENS), and the pairs times the edges they run
over are bounded (flow_work) before any is computed.

Max-flows are scipy's (Dinic, integer capacities): capacities are scaled by 2^30 and rounded, so a flow is within
about S 2^-31 of the exact value (under 1e-7 for S <= 64); the tests check it against a plain augmenting-path
reference in float64.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import maximum_flow
from torch import Tensor

from engine.analysis.flow import Fuse, fused_map, row_normalise

FLOW_MAX_TOKENS = 64  # positions: a max-flow per (query, key) pair per layer
SCALE = 2**30  # capacities <= 1 become integers <= 2^30: int32, as scipy's maximum_flow takes them


def fused_maps(layer_weights: Sequence[Tensor], heads: Fuse = "mean", residual: bool = True) -> list[Tensor]:
    """Each layer's (B, S, S) network: its heads fused, the residual identity added, rows normalised (float64)."""
    return [fused_map(w, heads, residual, "attention flow").cpu() for w in layer_weights]


def reachable(maps: Sequence[Tensor]) -> list[Tensor]:
    """Per layer T, (B, S, S) bool: some path of positive capacity runs from (T + 1, q) down to (0, k)."""
    out, joint = [], None
    for a in maps:
        step = (a > 0).double()
        joint = step if joint is None else ((step @ joint) > 0).double()
        out.append(joint > 0)
    return out


def flow_work(maps: Sequence[Tensor], layers: Sequence[int]) -> int:
    """What the flows after `layers` cost, in (pair, edge) units: per layer T, the reachable pairs times the edges
    of levels 0..T, summed over the batch. Layer 0 costs nothing (its flow is its map)."""
    reach = reachable(maps)
    edges = torch.stack([(a > 0).sum(dim=(-2, -1)) for a in maps]).cumsum(dim=0)  # (L, B)
    return sum(int((reach[t].sum(dim=(-2, -1)) * edges[t]).sum()) for t in layers if t > 0)


def _network(maps: Sequence[Tensor], item: int, s: int) -> csr_matrix:
    """Levels 0..len(maps) of positions, an edge (l + 1, q) -> (l, k) of capacity round(A_l[q, k] 2^30)."""
    rows, cols, caps = [], [], []
    for level, a in enumerate(maps):
        m = a[item].numpy()
        q, k = np.nonzero(m)
        c = np.rint(m[q, k] * SCALE).astype(np.int32)
        keep = c > 0
        rows.append((level + 1) * s + q[keep])
        cols.append(level * s + k[keep])
        caps.append(c[keep])
    n = (len(maps) + 1) * s
    return csr_matrix((np.concatenate(caps), (np.concatenate(rows), np.concatenate(cols))), shape=(n, n))


def attention_flow(
    layer_weights: Sequence[Tensor], heads: Fuse = "mean", residual: bool = True, layers: Sequence[int] | None = None
) -> dict[int, Tensor]:
    """layer_weights: each layer's (B, H, S, S) weights from layer 0. Returns F_T (B, S, S) for each T in `layers`
    (every layer by default), rows normalised, in the weights' dtype."""
    shown = sorted(set(range(len(layer_weights)) if layers is None else layers))
    maps = fused_maps(layer_weights[: shown[-1] + 1], heads, residual)
    b, s, _ = maps[0].shape
    reach = reachable(maps)
    out: dict[int, Tensor] = {}
    for t in shown:
        if t == 0:  # one level: the flow from q to k is the pipe between them
            out[0] = maps[0]
            continue
        flows = torch.zeros(b, s, s, dtype=torch.float64)
        for item in range(b):
            graph = _network(maps[: t + 1], item, s)
            source0 = (t + 1) * s
            for q, k in torch.nonzero(reach[t][item]).tolist():
                flows[item, q, k] = maximum_flow(graph, source0 + q, k, method="dinic").flow_value / SCALE
        out[t] = row_normalise(flows)
    dtype, device = layer_weights[0].dtype, layer_weights[0].device
    return {t: f.to(device=device, dtype=dtype) for t, f in out.items()}
