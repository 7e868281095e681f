"""fp8-scaled-mm's FeedForward in two cuBLASLt calls (`kernels.lt_ff`) in compiled DiT blocks.

`FusedFeedForward` takes the place of an LTX-2 FeedForward's `net` (GELUApprox, Identity, Linear),
built from its float weights: W1 by one scale, W2 by channel with the bias columns. Its input rows
are quantized by one scale (`ltx_tui::fp8_tensor_rows`), and `runtime.shared_rows` folds that into the
AdaLN norm before it, which writes them by a scale from the modulation's bound (`ltx_tui::ada_bound`:
no pass over x to find its amax), and folds the block's gated residual after it (`x + ff(...) *
gate`, one gate row) into FF2's epilogue (`ltx_tui::ff_fp8` with a residual and a gate). So a block's
FeedForward is the norm's pass and two GEMMs, where the row-scaled path has a GELU + row quantization
pass over the (tokens x 16384) activations and a residual pass after it.

Eagerly it runs `feed_forward` itself (x's amax found by a pass: no norm writes the rows). It is meant
for where the blocks are compiled and replayed in CUDA graphs (`transformer.fast_norm`'s traced
norms; each cuBLASLt call costs the host 0.1-0.2 ms to issue) on Hopper with nvmath-python, once
`FusedFeedForward.enabled` is set; elsewhere `fuse_gelu`'s row-scaled path stays.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from backends.runtime.quant import tensor_rows
from kernels import lt_ff


def _ff(q, xs, xnorm, w1, s1, w1norm, b1, b1max, w2, w2s, c, resid, gate) -> torch.Tensor:
    return lt_ff.feed_forward(q, xs, xnorm, lt_ff.FFWeights(w1, s1, w1norm, b1, b1max, w2, w2s, c), resid, gate)


@torch.library.custom_op("ltx_tui::ff_fp8", mutates_args=())
def _ff_op(q: torch.Tensor, xs: torch.Tensor, xnorm: torch.Tensor, w1: torch.Tensor, s1: torch.Tensor,
           w1norm: torch.Tensor, b1: torch.Tensor, b1max: torch.Tensor, w2: torch.Tensor, w2s: torch.Tensor,
           c: torch.Tensor, resid: torch.Tensor | None, gate: torch.Tensor | None) -> torch.Tensor:
    """[resid +] [gate *] the FeedForward of rows q (`kernels.lt_ff.feed_forward`)."""
    return _ff(q, xs, xnorm, w1, s1, w1norm, b1, b1max, w2, w2s, c, resid, gate)


@_ff_op.register_fake
def _ff_fake(q, xs, xnorm, w1, s1, w1norm, b1, b1max, w2, w2s, c, resid, gate):
    if resid is not None:
        return torch.empty_like(resid)
    return q.new_empty((q.shape[0], w2.shape[0]), dtype=b1.dtype)


class FusedFeedForward(nn.Module):
    """An LTX-2 FeedForward's `net` as `kernels.lt_ff.feed_forward` (its weights in `FFWeights`' form)."""

    # Off until its first forward is cheap: on the H100 the first forward of a process with it took 115-139 s
    # more than without (bench/RESULTS.md "seventeenth round"; where, is not yet known), more than it saves in
    # any run (0.29 ms a block). bench/ltx2_dit.py's `:lt-ff` ablation turns it on.
    enabled = False

    def __init__(self, proj: nn.Linear, out: nn.Linear) -> None:
        super().__init__()
        w = lt_ff.prepare(proj.weight, proj.bias, out.weight, out.bias, proj.weight.dtype)
        for name, t in w._asdict().items():
            self.register_buffer(name, t)
        self.in_features, self.out_features = proj.in_features, out.out_features

    def extra_repr(self) -> str:
        return f"{self.in_features} -> {self.w1.shape[0]} -> {self.out_features}, cuBLASLt fp8 (kernels.lt_ff)"

    def weights(self) -> tuple[torch.Tensor, ...]:
        return tuple(getattr(self, name) for name in lt_ff.FFWeights._fields)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, s, norm = tensor_rows(x.reshape(-1, x.shape[-1]))
        ff = _ff_op if torch.compiler.is_compiling() else _ff
        return ff(q, s, norm, *self.weights(), None, None).reshape(*x.shape[:-1], self.out_features)


def _feed_forward_net(net: nn.Module) -> bool:
    """LTX-2's FeedForward `net` with both linears unquantized, in a 16-bit dtype, of widths cuBLASLt's fp8
    GEMMs take."""
    from backends.runtime.quant import ltx2_feed_forward_net

    return (ltx2_feed_forward_net(net) and type(getattr(net[0], "proj", None)) is nn.Linear and type(net[2]) is nn.Linear
            and net[0].proj.weight.dtype in (torch.bfloat16, torch.float16)
            and net[0].proj.in_features % 16 == 0 and net[0].proj.out_features % 16 == 0
            and net[2].out_features % 16 == 0)


def fuse_ff(model: nn.Module, targets: tuple[str, ...]) -> list[str]:
    """Put `FusedFeedForward` in every LTX-2 FeedForward `net` of the video blocks (`*.ff.net`; the
    audio's 126 tokens keep the few-row kernel) whose two linears are among `targets`; returns their
    names."""
    chosen = set(targets)
    fused = []
    for name, net in list(model.named_modules()):
        if (name.endswith(".ff.net") and _feed_forward_net(net)
                and {f"{name}.0.proj", f"{name}.2"} <= chosen):
            parent, _, attr = name.rpartition(".")
            setattr(model.get_submodule(parent), attr, FusedFeedForward(net[0].proj, net[2]))
            fused.append(name)
    return fused
