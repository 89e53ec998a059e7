"""Products on a GPU whose rows come out the same whatever the row count (batch invariance).

cuBLAS chooses its kernel by a product's shape (tile sizes, a split of the input dimension, another kernel for one
row), so a row's numbers would follow how many rows share its step: the row bucket of a CUDA graph, the tokens of
an encoder batch (on an H100, the output projections differ at every row count from the row alone, a 4096-wide
input from 63 rows: `python -m loadtests.gpu_invariance`). Every Linear of a GPU model therefore multiplies a fixed
number of rows at a time, the last block padded with zero rows: cuBLAS sees one shape per weight whatever the batch,
and a row's numbers depend on that row alone. The decoder step's weights take DECODER_ROWS (its smallest CUDA-graph
bucket, so its products need no padding: model.kernels.static_step); the encoder's and the cross-attention memory
projections, which see every token of the sources, ENCODER_ROWS, so that a batch of sources takes few products.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

DECODER_ROWS = 64
ENCODER_ROWS = 256
ROW_ALIGNMENT = 4  # float32 scores: 16 bytes


class FixedRowsLinear(nn.Linear):
    rows_at_a_time: int

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows, block = x.numel() // x.shape[-1], self.rows_at_a_time
        flat = x.reshape(rows, self.in_features)
        if rows % block:
            flat = F.pad(flat, (0, 0, 0, block - rows % block))
        y = torch.cat([F.linear(part, self.weight, self.bias) for part in flat.split(block)]) \
            if len(flat) > block else F.linear(flat, self.weight, self.bias)  # (blocks × block, out)
        return y[:rows].view(*x.shape[:-1], self.out_features)


def log_softmax(scores: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """torch.log_softmax of (n, V) float32 scores over the vocabulary, into out (n, V). On a GPU over rows padded
    with -inf (adding nothing to a row's sum) to a multiple of 16 bytes: over opus-mt's 58,101 columns as they are,
    a search's log-probabilities followed its batch on an H100, over the padded rows they did not (why is open:
    loadtests/README.md, "Batch invariance on the GPU")."""
    vocab = scores.shape[-1]
    if scores.device.type != "cuda" or vocab % ROW_ALIGNMENT == 0:
        return torch.log_softmax(scores, dim=-1, out=out)
    padded = F.pad(scores, (0, -vocab % ROW_ALIGNMENT), value=float("-inf"))  # (n, V′), V′ · 4 bytes ≡ 0 mod 16
    return out.copy_(torch.log_softmax(padded, dim=-1)[:, :vocab])


def use_fixed_row_products(model: nn.Module, enable: bool = True) -> nn.Module:
    """Switch every nn.Linear of a GPU Seq2SeqTransformer to FixedRowsLinear (enable=False switches back):
    parameter names, weight tying and state_dict keys stay as they are."""
    old, new = (nn.Linear, FixedRowsLinear) if enable else (FixedRowsLinear, nn.Linear)
    over_sources = {id(m) for m in model.encoder_layers.modules()} | {
        id(layer.encoder_attn.kv_proj) for layer in model.decoder_layers}
    for module in model.modules():
        if type(module) is old:
            module.__class__ = new
            if enable:
                module.rows_at_a_time = ENCODER_ROWS if id(module) in over_sources else DECODER_ROWS
    return model
