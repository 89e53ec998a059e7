"""int8 dynamic quantization for CPU inference: Linear weights stored as int8, activations quantized per step.

Uses torch.ao's dynamically quantized Linear (deprecated upstream in favour of torchao, still shipped and working in
torch 2.13) with a scale per output channel (as CTranslate2's int8): a fused projection (Q, K and V stacked) with one
scale per matrix would round its smallest part coarsely. Embeddings stay float; the
output projection gets its own int8 copy of the tied weight. Each Linear is swapped for its int8 one in place, so its
float weight is freed there: quantize_dynamic leaves every Linear it replaced in a reference cycle (its qconfig's
observer factory closes over the module), alive until the next full garbage collection. The output projection (a
vocabulary × d_model matrix) is quantized a block of rows at a time (Int8Rows), first in a load (load_network): an
untied one as the checkpoint is read, so its float32 matrix never exists whole; a tied one from the embeddings,
which stay; then it is packed twice (Int8Output): torch's x86 engine (fbgemm's kernel) for a few rows, oneDNN's for
many.
"""

from __future__ import annotations

import warnings

import torch
from torch import nn
from torch.ao.nn.quantized.dynamic import Linear as Int8Linear
from torch.ao.quantization import per_channel_dynamic_qconfig

from .cpu_kernels import use_onednn_linears
from .cpu_memory import release_freed_memory
from .layers import fixed_in_trace
from .transformer import Seq2SeqTransformer

# From this many rows on, the int8 output projection multiplies through oneDNN's kernel: on NLLB's 256,206 × 1,024
# matrix it takes 141 ms at 128 rows to fbgemm's 182, about as long at 32, and twice fbgemm's time at 1 to 4 rows.
WIDE_ROWS = 64


def quantize_linears(module: nn.Module) -> None:
    """`module`'s Linear layers as int8, in place, and the memory their float weights held given back to the system
    (load_network calls it on each layer as the layer's weights come in)."""
    for parent in list(module.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear:
                child.qconfig = per_channel_dynamic_qconfig
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    setattr(parent, name, Int8Linear.from_float(child))
    release_freed_memory()


class Int8Rows:
    """A Linear's weight (out_features × in_features) quantized as its rows come in, a block at a time, into an int8
    buffer: the scale of each row depends on that row alone, so the blocks round exactly as Int8Linear.from_float
    rounds the whole matrix (the same observer and quantize_per_channel)."""

    def __init__(self, out_features: int, in_features: int):
        self.shape = torch.Size((out_features, in_features))
        self.values = torch.empty(self.shape, dtype=torch.int8)
        self.scales = torch.empty(out_features, dtype=torch.float64)  # as from_float hands them to quantize_per_channel

    def quantize_rows(self, first: int, block: torch.Tensor) -> None:
        block = block.float()  # as the float32 parameter would hold it
        observer = per_channel_dynamic_qconfig.weight()
        observer(block)
        scales, zero_points = observer.calculate_qparams()  # zero points: 0 (symmetric)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rows = torch.quantize_per_channel(block, scales.double(), zero_points.long(), 0, torch.qint8)
        self.values[first:first + len(block)] = rows.int_repr()
        self.scales[first:first + len(block)] = scales

    def linear(self, bias: torch.Tensor | None) -> Int8Linear:
        """The int8 Linear of all the rows, as from_float builds it; the int8 buffer let go (the weight is a copy)."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            weight = torch._make_per_channel_quantized_tensor(self.values, self.scales,
                                                               torch.zeros_like(self.scales, dtype=torch.int64), 0)
            self.values = None
            linear = Int8Linear(self.shape[1], self.shape[0], dtype=torch.qint8)
            linear.set_weight_bias(weight, bias)
        return linear


def quantize_in_blocks(linear: nn.Linear, block_bytes: int = 16 * 2**20) -> Int8Linear:
    """`linear` as int8, its rows quantized a block at a time (Int8Rows): the transient is a block, not the several
    times the int8 matrix that from_float holds at once."""
    rows = Int8Rows(*linear.weight.shape)
    step = max(1, block_bytes // (linear.weight.shape[1] * 4))
    for first in range(0, linear.weight.shape[0], step):
        rows.quantize_rows(first, linear.weight[first:first + step].detach())
    return rows.linear(None if linear.bias is None else linear.bias.detach())


class Int8Output(nn.Module):
    """The int8 output projection packed for two kernels, the same int8 weight and scales: `narrow` (torch's
    default x86 engine) below WIDE_ROWS rows, `wide` (oneDNN) from there on (a choice per trace: fixed_in_trace).
    The second packing costs vocabulary × d_model bytes."""

    def __init__(self, narrow: Int8Linear):
        super().__init__()
        self.narrow = narrow
        weight, bias = narrow._weight_bias()
        engine = torch.backends.quantized.engine
        torch.backends.quantized.engine = "onednn"  # a Linear's packing follows the engine set when it is made
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self.wide = Int8Linear(narrow.in_features, narrow.out_features, dtype=torch.qint8)
                self.wide.set_weight_bias(weight, bias)
        finally:
            torch.backends.quantized.engine = engine

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        wide = fixed_in_trace(x.numel() // x.shape[-1]) >= WIDE_ROWS
        return self.wide(x) if wide else self.narrow(x)


def quantize_int8(model: Seq2SeqTransformer) -> Seq2SeqTransformer:
    """The model's Linear layers (those load_network has not quantized yet) as int8."""
    if model.device.type != "cpu" or model.dtype != torch.float32:
        raise ValueError("int8 dynamic quantization needs a float32 model on the CPU")
    use_onednn_linears(model, enable=False)  # int8 replaces plain nn.Linear modules only
    quantize_linears(model)
    return model
