"""int8 for CPU inference: Linear weights stored as int8, activations rounded to int8 at every product.

Weights carry a scale per output channel (as CTranslate2's int8): a fused projection (Q, K and V stacked) with one
scale per matrix would round its smallest part coarsely. Activations carry a scale per row (per token), so a row's
rounding depends on that row alone, and the int8 × int8 product accumulates exactly in int32: a row's result is the
same whatever else is in its step (batch invariance; torch's dynamically quantized Linear scales a whole step's
activations by their largest value, so one sequence's numbers moved with its neighbours'). Embeddings stay float.

Activations go to the product as u8 with a zero point (the value plus `limit`), which every x86 kernel multiplies by
s8 weights natively (s8 × s8 sends CPUs without AMX to oneDNN's reference kernel). Where the CPU has no VNNI the
kernel sums pairs of products in 16 bits, so there activations keep to 7 bits (isa.int8_activation_range): still
exact. The product is oneDNN's where VNNI or AMX sum exactly in one instruction, ours below that (int8_native).

Each Linear is replaced by its int8 one as the checkpoint's layers come in (load_network), so the float32 model
never exists whole. A matrix is quantized a block of rows at a time (Int8Rows): the output projection (a vocabulary
× d_model matrix) is quantized first, an untied one as its rows are read, a tied one from the embeddings, which
stay.
"""

from __future__ import annotations

from typing import List, Optional, Union

import torch
from torch import nn

from . import int8_native, isa
from .cpu_memory import release_freed_memory

INT8_MAX = 127  # symmetric: -127..127, so that a value and its negation round alike
_TINY = torch.finfo(torch.float32).tiny  # the scale of an all-zero row: its values stay 0


def quantize_rows(x: torch.Tensor, limit: int = INT8_MAX) -> tuple[torch.Tensor, torch.Tensor]:
    """x (M, K) float32 → int8 values (M, K) and float32 scales (M, 1), x ≈ values · scales: each row on a scale of
    its own, its largest magnitude at `limit`."""
    scales = _row_scales(x, limit)
    return torch.round(x / scales).to(torch.int8), scales


def shifted_rows(x: torch.Tensor, limit: int) -> tuple[torch.Tensor, torch.Tensor]:
    """quantize_rows' values plus `limit`, as u8 (M, K) in 0..2·limit, and their scales (M, 1): an activation as
    oneDNN's u8 × s8 kernels take it, with `limit` as its zero point."""
    scales = _row_scales(x, limit)
    return torch.round(x / scales).add_(limit).to(torch.uint8), scales


def _row_scales(x: torch.Tensor, limit: int) -> torch.Tensor:
    return x.abs().amax(-1, keepdim=True).clamp_min(_TINY) / limit


class Int8Linear(nn.Module):
    """y = x·Wᵀ + b with W held as int8 values and a scale per output channel; x rounded to int8 per row
    (shifted_rows, within the range this process's kernels sum exactly), multiplied in int8 with int32 sums (exact,
    so a row's sums do not depend on the kernel's blocking or on the other rows), then scaled back to float32.
    The product is ours (int8_native, which rounds the rows itself) or oneDNN's, each on the weight laid out once
    for it (torch._int_mm reorders it on every call: twice as slow at one row)."""

    def __init__(self, values: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None):
        super().__init__()
        self.out_features, self.in_features = values.shape
        self.activation_limit = isa.int8_activation_range()  # the kernels' exact range, as they run here
        self.own_kernel = int8_native.own_kernel()
        if self.own_kernel:
            self.register_buffer("packed", int8_native.pack(values))
            self.register_buffer("column_sums", values.sum(1, dtype=torch.int32))  # (out,): takes the shift back
        else:
            self.register_buffer("packed", torch.ops.onednn.qlinear_prepack(values, None))  # oneDNN's layout
            self.register_buffer("zero_points", torch.zeros(self.out_features, dtype=torch.long))  # symmetric
        self.register_buffer("scales", scales.float())  # (out,)
        self.register_buffer("bias", None if bias is None else bias.detach().float())  # (out,)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features)  # (M, in)
        if self.own_kernel:
            y = torch.ops.seq2seq_int8.linear(rows.contiguous(), self.packed, self.column_sums, self.scales,
                                              self.bias, self.activation_limit)
        else:
            values, row_scales = shifted_rows(rows, self.activation_limit)  # (M, in), (M, 1)
            y = _int8_product(values, self.activation_limit, self.packed, self.scales, self.zero_points)
            y.mul_(row_scales)  # (M, out)
            if self.bias is not None:
                y.add_(self.bias)
        return y.view(*x.shape[:-1], self.out_features)


@torch.jit.script
def _int8_product(values: torch.Tensor, zero_point: int, packed: torch.Tensor, scales: torch.Tensor,
                  zero_points: torch.Tensor) -> torch.Tensor:
    """u8 rows (M, in) less their zero point, times the packed weight → float32 (M, out), each int32 sum times its
    channel's scale.
    Scripted: the tracer takes no empty list of optional scalars from Python (as cpu_kernels._linear_pointwise)."""
    no_scalars: List[Optional[Union[int, float, complex]]] = []
    return torch.ops.onednn.qlinear_pointwise(values, 1.0, zero_point, packed, scales, zero_points, None, 1.0, 0,
                                              torch.float32, "none", no_scalars, "")


class Int8Rows:
    """A Linear's weight (out_features × in_features) quantized as its rows come in, a block at a time, into an int8
    buffer: the scale of each row depends on that row alone, so the blocks round exactly as the whole matrix would."""

    def __init__(self, out_features: int, in_features: int):
        self.shape = torch.Size((out_features, in_features))
        self.values = torch.empty(self.shape, dtype=torch.int8)
        self.scales = torch.empty(out_features, dtype=torch.float32)

    def quantize_rows(self, first: int, block: torch.Tensor) -> None:
        values, scales = quantize_rows(block.float())  # as the float32 parameter would hold it
        self.values[first:first + len(block)] = values
        self.scales[first:first + len(block)] = scales[:, 0]

    def linear(self, bias: torch.Tensor | None) -> Int8Linear:
        """The int8 Linear of all the rows (it takes the buffer)."""
        linear = Int8Linear(self.values, self.scales, bias)
        self.values = None
        return linear


def quantize_in_blocks(linear: nn.Linear, block_bytes: int = 16 * 2**20) -> Int8Linear:
    """`linear` as int8, its rows quantized a block at a time (Int8Rows): the transient is a block of float32 rows,
    not a float copy of the whole matrix."""
    rows = Int8Rows(*linear.weight.shape)
    step = max(1, block_bytes // (linear.weight.shape[1] * 4))
    for first in range(0, linear.weight.shape[0], step):
        rows.quantize_rows(first, linear.weight[first:first + step].detach())
    return rows.linear(linear.bias)


def quantize_linears(module: nn.Module) -> None:
    """`module`'s Linear layers as int8, in place, and the memory their float weights held given back to the system
    (load_network calls it on each layer as the layer's weights come in)."""
    for parent in list(module.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear:
                setattr(parent, name, quantize_in_blocks(child))
    release_freed_memory()
