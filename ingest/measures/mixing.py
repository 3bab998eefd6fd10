"""Context mixing after the residual and the LayerNorm (Kobayashi et al. 2021), per head and
per layer, reduced on the device in the same pass as the head statistics.

For a post-LN layer with input x, heads h, f_h(x) = (x W_V^h + b_V^h) W_O^h, the attention
block's LayerNorm input is z_i = x_i + Σ_h Σ_j A^h[i,j] f_h(x_j) + b_O and its output
y_i = γ ⊙ (z_i − μ(z_i)) / σ(z_i) + β. Centring is linear, so y_i is exactly a sum of terms
(:func:`ln_terms`):

- one per head and key, t_h,ij = γ ⊙ c(A^h[i,j] f_h(x_j)) / σ_i, with c(u) = u − μ(u);
- the residual's, r_i = γ ⊙ c(x_i) / σ_i;
- the bias terms, γ ⊙ c(b_O) / σ_i + β.

Per head, its shares (docs/metrics.md#context-mixing) are those of ||t_h,ij|| = A^h[i,j]
||γ ⊙ c(f_h(x_j))|| / σ_i over the keys; σ_i is common to a row and cancels in every share,
so neither it nor the layer's output is needed. Per layer, the full contribution of token j
to token i is c_ij = ||Σ_h t_h,ij + [i = j] r_i||: its square is a quadratic form in the
heads' weights with the (heads × heads) Gram matrix of γ ⊙ c(f_h(x_j)) per key, so no tensor
of size keys × queries × model width is formed.

Two per-layer measures of how much row i takes from other tokens:

- the mixing ratio as Kobayashi et al. define and compute it (their released code's
  ``attnresln_n_mixing_ratio``), from norms of *summed* vectors: m_i = ||Σ_{j≠i} c_ij||,
  p_i = ||c_ii||, ratio_i = m_i / (m_i + p_i). The vectors from other tokens partly cancel;
  Σ_{j≠i} c_ij is computed in head space from the heads' outputs without their own token;
- the mixing share, Σ_{j≠i} ||c_ij|| / Σ_j ||c_ij||, the share of the summed norms, which
  counts every token's contribution at its full size and so is larger.

The residual x is what the attention module is called with (true of every post-LN family
attnwh reads); :meth:`ContextMixing.hooks` keeps it for the layer's observer call.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from attnwh.ingest.measures import fused, patterns
from attnwh.ingest.model.reading import AttentionOutput
from attnwh.ingest.model.tiles import Tile

# Shares of the post-LayerNorm contributions to the targets of head_stats' to_* columns.
_TARGET_COLUMNS = ("rn_to_cls", "rn_to_sep", "rn_to_punct", "rn_to_self", "rn_to_prev", "rn_to_next")
HEAD_COLUMNS: tuple[str, ...] = (*_TARGET_COLUMNS, "rn_residual")
LAYER_COLUMNS: tuple[str, ...] = ("mixing_ratio", "mixing_share", "residual_share", *_TARGET_COLUMNS)


def _centred(u: torch.Tensor) -> torch.Tensor:
    return u - u.mean(-1, keepdim=True)


def _per_head_projection(dense: nn.Linear, num_heads: int) -> torch.Tensor:
    """W_O as (heads, head_dim, width): y = x @ weight.T, so head h's rows of weight.T."""
    weight = dense.weight.detach().float()  # (width, heads * head_dim)
    return weight.view(weight.shape[0], num_heads, -1).permute(1, 2, 0)


def ln_terms(
    x: torch.Tensor, probs: torch.Tensor, value: torch.Tensor, output: AttentionOutput, num_heads: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The decomposition itself, at full size, in float32: per-head terms (B, H, S, S, width)
    t_h,ij, residual terms (B, S, width) r_i and bias terms (B, S, width), which add up to the
    LayerNorm's output y_i. For checks and single examples: it holds S² model-width vectors
    per head."""
    norm = output.norm
    if norm is None:
        raise ValueError("the attention block has no LayerNorm after its residual sum")
    gamma = norm.weight.detach().float()
    weight = _per_head_projection(output.dense, num_heads)
    bias = output.dense.bias.detach().float() if output.dense.bias is not None else weight.new_zeros(weight.shape[-1])
    a, v, x = probs.float(), value.float(), x.float()
    f = torch.einsum("bhsd,hde->bhse", v, weight)  # f_h(x_j)
    z = x + torch.einsum("bhij,bhje->bie", a, f) + bias
    sigma = (z.var(-1, unbiased=False) + norm.eps).sqrt()[..., None]  # (B, S, 1)
    heads = gamma * _centred(a[..., None] * f[:, :, None]) / sigma[:, None, :, None]
    residual = gamma * _centred(x) / sigma
    beta = norm.bias.detach().float() if norm.bias is not None else torch.zeros_like(gamma)
    biases = gamma * _centred(bias) / sigma + beta
    return heads, residual, biases


class ContextMixing:
    """Per-head and per-layer shares after residual and LayerNorm, for the attention modules
    of one model. Use inside :meth:`hooks` (which keeps each module's input, the residual)
    and call :meth:`observe` from the attention observer with the layer's weights."""

    def __init__(self, outputs: Mapping[nn.Module, AttentionOutput], num_heads: int) -> None:
        self._outputs = dict(outputs)
        # P_h = W_O^h with the LayerNorm's centring and γ folded in: c(v W) ⊙ γ = v (c(W) ⊙ γ),
        # so v_h,j P_h is γ ⊙ c(f_h(x_j)), written f_h(x_j) below.
        self._gammas: dict[int, torch.Tensor] = {}
        self._stacked: dict[int, torch.Tensor] = {}  # P_h as one (width, H·d) matrix, for r_i
        # K_j[h, g] = <f_h(x_j), f_g(x_j)> = v_h,j P_h P_gᵀ v_g,j: per head h the (d, (H - h)·d)
        # matrix [P_h P_gᵀ for g ≥ h]. Working in head space (d ≪ width) and on one triangle of
        # the symmetric K_j takes under half the multiplications of forming f_h(x_j) (width
        # wide) and then their Gram matrix.
        self._upper: dict[int, list[torch.Tensor]] = {}
        # The triangle comes out packed, row by row (h, g ≥ h); these pick K_j whole, and its
        # diagonal, from the packed values.
        heads = range(num_heads)
        place = {pair: i for i, pair in enumerate((h, g) for h in heads for g in heads if g >= h)}
        device = next((o.dense.weight.device for o in outputs.values()), None)
        self._whole = torch.tensor([place[min(h, g), max(h, g)] for h in heads for g in heads], device=device)
        self._diagonal = torch.tensor([place[h, h] for h in heads], device=device)
        for module, output in outputs.items():
            if output.norm is None:
                continue
            gamma = output.norm.weight.detach().float()
            self._gammas[id(module)] = gamma
            projection = gamma * _centred(_per_head_projection(output.dense, num_heads))  # (H, d, width)
            stacked = projection.permute(2, 0, 1).reshape(projection.shape[-1], -1)
            self._stacked[id(module)] = stacked
            wide = stacked.double()  # products of products: accumulate in float64 once
            self._upper[id(module)] = [
                (projection[h].double() @ wide[:, h * p.shape[0] :]).float() for h, p in enumerate(projection)
            ]
        self._inputs: dict[int, torch.Tensor] = {}

    @staticmethod
    def applies(outputs: Mapping[nn.Module, AttentionOutput]) -> bool:
        """Whether every attention block of the model is followed by a LayerNorm of its
        residual sum (post-LN), the setting the decomposition is defined for."""
        return bool(outputs) and all(o.norm is not None for o in outputs.values())

    @contextlib.contextmanager
    def hooks(self) -> Iterator[None]:
        """Inside the block, each attention module's input hidden states are kept until the
        module's next call; the hooks are always removed."""

        def keep(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            # BERT-like, DeBERTa, MPNet, ALBERT take hidden_states first; DistilBERT query=x.
            x = args[0] if args else kwargs.get("hidden_states", kwargs.get("query"))
            if not isinstance(x, torch.Tensor):
                raise RuntimeError(f"cannot find the input hidden states of {type(module).__name__}")
            self._inputs[id(module)] = x

        handles = [m.register_forward_pre_hook(keep, with_kwargs=True) for m in self._outputs]
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()
            self._inputs.clear()

    def key_terms(self, module: nn.Module, v: torch.Tensor) -> KeyTerms:
        """What every row of a layer's maps shares, from its values v (B, H, S, d), each up to
        the row's σ_i (see :class:`KeyTerms`). Inside :meth:`hooks`, after the module's call."""
        x = self._inputs[id(module)].float()
        batch, heads, length, d = v.shape
        n = batch * length
        # Every token of the batch at once, in few, large operations: on a CPU each costs a few
        # microseconds before it computes anything, and many small per-example products are
        # several times slower. v_h,n by token, (N, H, d): no copy where the model lays the
        # heads out along the width (BERT-like); each head's (N, d) slice is a strided matrix.
        by_token = v.transpose(1, 2).reshape(n, heads, d)
        packed = torch.cat(  # K_n[h, g] = <f_h(x_n), f_g(x_n)> for g ≥ h
            [
                torch.mm(by_token[:, h], upper).view(n, heads - h, d).mul_(by_token[:, h:]).sum(-1)
                for h, upper in enumerate(self._upper[id(module)])
            ],
            dim=1,
        )
        gram = packed.index_select(1, self._whole).view(batch, length, heads, heads)
        norms = packed.index_select(1, self._diagonal).clamp_min_(0).sqrt_()  # ||f_h(x_n)||
        norms = norms.view(batch, length, heads).transpose(1, 2)  # (B, H, S)
        xs = _centred(x).mul_(self._gammas[id(module)])  # σ_i·r_i
        x_norm = xs.norm(dim=-1)  # (B, S)
        # <f_h(x_i), r_i> = v_h,i · (P_h r_i): one (tokens × width) @ (width × heads·d) product.
        projected = torch.mm(xs.view(n, -1), self._stacked[id(module)]).view(n, heads, d)
        cross = projected.mul_(by_token).sum(-1).view(batch, length, heads)
        return KeyTerms(gram, norms, x_norm, cross)

    def block_rows(self, terms: KeyTerms, tile: Tile, a: torch.Tensor, d0: torch.Tensor) -> torch.Tensor:
        """c_ij for the rows and keys of `tile`, whose weights `a` (B, H, rows, keys) are in
        float32, up to σ_i: (B, rows, keys). `d0` (B, H, rows) is the tile's A[i, i]."""
        # c_ij² = a_ijᵀ K_j a_ij (+ the residual's terms on the diagonal), with K_j[h, g] =
        # <f_h(x_j), f_g(x_j)> and a_ij the heads' weights A^h[i, j].
        rows = tile.rows
        squared = fused.squares(a, terms.gram[:, tile.keys])  # (B, i, j)
        diagonal = 2 * (d0 * terms.cross[:, rows].transpose(1, 2)).sum(1) + terms.x_norm[:, rows] ** 2
        squared.diagonal(offset=tile.start - tile.key_start, dim1=-2, dim2=-1).add_(diagonal)
        return squared.clamp_min_(0).sqrt_()

    def contributions(
        self, module: nn.Module, a: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """For one layer's whole weights a (B, H, S, S) and values v (B, H, S, d), each up to
        the row's σ_i: the norms ||γ ⊙ c(f_h(x_j))|| of every head's term per key (B, H, S),
        the residual's ||r_i|| (B, S), and the whole block's c_ij = ||Σ_h t_h,ij + [i = j] r_i||
        (B, S, S). Inside :meth:`hooks`, after the module's call."""
        terms = self.key_terms(module, v)
        return terms.norms, terms.x_norm, self.block_rows(terms, Tile(0, 0, a), a, a.diagonal(dim1=-2, dim2=-1))

    def stacked(self, module: nn.Module) -> torch.Tensor:
        """P_h of `module`'s heads as one (width, H·d) matrix."""
        return self._stacked[id(module)]

    def layer(
        self,
        module: nn.Module,
        value: torch.Tensor,
        row_weight: torch.Tensor,
        columns: torch.Tensor,
        next_ok: torch.Tensor,
    ) -> LayerMixing:
        """The reductions of one layer, to be fed its tiles: `row_weight` (B, S) is 1/n on
        real rows, `columns` (B, 1, S, 4) the [CLS], [SEP] and punctuation columns and a
        column of ones, `next_ok` (B, S) whether row i has a real right neighbour."""
        v = value.float()
        return LayerMixing(self, module, v, self.key_terms(module, v), row_weight, columns, next_ok)


@dataclass(frozen=True)
class KeyTerms:
    """Per layer, up to each row's σ_i: `gram` (B, S, H, H) K_j[h, g] = <f_h(x_j), f_g(x_j)>
    per key, `norms` (B, H, S) = ||f_h(x_j)||, `x_norm` (B, S) the residual's ||r_i||, and
    `cross` (B, S, H) = <f_h(x_i), r_i>."""

    gram: torch.Tensor
    norms: torch.Tensor
    x_norm: torch.Tensor
    cross: torch.Tensor


class LayerMixing:
    """The per-head and per-layer shares of one layer, accumulated a tile of query rows at a
    time (:meth:`add`), every one of them a mean over rows (see :meth:`ContextMixing.layer`)."""

    def __init__(
        self,
        mixing: ContextMixing,
        module: nn.Module,
        v: torch.Tensor,
        terms: KeyTerms,
        row_weight: torch.Tensor,
        columns: torch.Tensor,
        next_ok: torch.Tensor,
    ) -> None:
        self.mixing, self.module, self.v, self.terms = mixing, module, v, terms
        self.row_weight, self.next_ok = row_weight, next_ok
        self.columns = columns
        # Per key, the head terms' norms times the target columns and ones.
        self.scaled_columns = terms.norms[..., None] * columns  # (B, H, S, 4)
        batch, heads = v.shape[:2]
        # Means over rows, accumulated in float64 (see `HeadStatistics.observe_tile`).
        self.per_head = v.new_zeros((batch, heads, len(HEAD_COLUMNS)), dtype=torch.float64)
        self.per_layer = v.new_zeros((batch, len(LAYER_COLUMNS)), dtype=torch.float64)

    def add(
        self,
        tile: Tile,
        a: torch.Tensor,
        diagonals: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
        products: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> None:
        """`tile` with its weights `a` in float32 (B, H, rows, keys); `diagonals` its A[i, i],
        A[i, i-1], A[i, i+1] (`patterns.row_diagonals`); `products`, when the caller has them
        from one product of its own: a @ :attr:`scaled_columns` and a @ v, over the tile's keys."""
        keys = tile.keys
        if products is None:
            products = (a @ self.scaled_columns[:, :, keys], torch.matmul(a, self.v[:, :, keys]))
        column_sums, weighted_values = products
        terms, v = self.terms, self.v
        batch, heads, _, d = v.shape
        start, rows, count = tile.start, tile.rows, a.shape[-2]
        tiny = torch.finfo(torch.float32).tiny
        next_ok = self.next_ok[:, rows]  # (B, rows)
        c = self.mixing.block_rows(terms, tile, a, diagonals[0])[:, None]  # (B, 1, rows, keys)

        # Per head: ||t_h,ij|| = A^h[i,j] ||f_h(x_j)|| up to σ_i, which every share divides out.
        # The tile's diagonals scaled by the key's norm: j = i, i - 1, i + 1.
        own, prev, nxt = (
            diagonal * _shifted(terms.norms, start, count, k) for k, diagonal in zip((0, -1, 1), diagonals)
        )
        neighbours = (own, prev, nxt)
        head_sums = _target_sums(column_sums, neighbours, next_ok)  # (B, H, rows, 7)
        head_total = head_sums[..., 6:]  # (B, H, rows, 1)
        residual = terms.x_norm[:, None, rows, None].expand(-1, heads, -1, -1)
        head_rows = torch.cat([head_sums[..., :6], residual], dim=-1).div_(
            torch.cat([head_total.expand(-1, -1, -1, 6), residual + head_total], dim=-1).clamp_min_(tiny)
        )
        weight = self.row_weight[:, rows].double()
        self.per_head += (weight[:, None, None] @ head_rows.double()).squeeze(-2)  # mean over the real rows

        layer_diagonals = patterns.row_diagonals(c, start - tile.key_start)
        layer_sums = _target_sums(c @ self.columns[:, :, keys], layer_diagonals, next_ok)[:, 0]  # (B, rows, 7)
        shares = layer_sums[..., :6] / layer_sums[..., 6:].clamp_min(tiny)

        # The mixing ratio: Σ_{j≠i} c_ij as a vector is Σ_h w_h,i P_h with w_h,i the head's
        # output without its own token, Σ_j A^h[i,j] v_h,j − A^h[i,i] v_h,i: one product with
        # the stacked P_h, model width wide once per token. p_i = ||c_ii|| is c's diagonal.
        others = weighted_values - diagonals[0][..., None] * v[:, :, rows]  # (B, H, rows, d)
        stacked = self.mixing.stacked(self.module)
        mixed = torch.mm(others.transpose(1, 2).reshape(batch * count, heads * d), stacked.t())
        m = mixed.norm(dim=-1).view(batch, count)
        p = layer_diagonals[0][:, 0]
        x_norm = terms.x_norm[:, rows]
        layer_rows = torch.cat(
            [
                (m / (m + p).clamp_min(tiny))[..., None],  # mixing ratio (Kobayashi et al.)
                (1 - shares[..., 3:4]),  # mixing share: every norm but j = i's
                (x_norm / (x_norm + head_total[..., 0].sum(1)).clamp_min(tiny))[..., None],
                shares,
            ],
            dim=-1,
        )
        self.per_layer += (weight[:, None] @ layer_rows.double()).squeeze(-2)


def _shifted(norms: torch.Tensor, start: int, count: int, k: int) -> torch.Tensor:
    """norms[..., i + k] for the rows i = start … start + count - 1 (0 out of range)."""
    padded = nn.functional.pad(norms, (1, 1))
    return padded[..., 1 + start + k : 1 + start + k + count]


def _target_sums(
    column_sums: torch.Tensor,
    neighbours: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    next_ok: torch.Tensor,
) -> torch.Tensor:
    """Per row i of a tile of non-negative contributions (B, H, rows, S): the sums over the
    [CLS], [SEP] and punctuation columns, over j = i, i - 1 and i + 1 (0 where no real
    neighbour), and over every j: (B, H, rows, 7). `column_sums` (B, H, rows, 4) is the tile
    times the three target columns and ones; `neighbours` the tile's contributions at j = i,
    i - 1, i + 1 ((B, H, rows) each); `next_ok` (B, rows) whether row i has a real right
    neighbour."""
    own, prev, nxt = neighbours
    return torch.cat(
        [column_sums[..., :3], torch.stack([own, prev, nxt * next_ok[:, None]], dim=-1), column_sums[..., 3:]], dim=-1
    )
