"""float32 matmuls on the CPU through oneDNN instead of torch's default (MKL) path, on weights laid out for it.

torch sends a float32 nn.Linear to MKL's sgemm; oneDNN's kernel, which torch ships and uses for bfloat16 anyway, is
faster at every decoding shape, with the same float32 accumulation. Switching the class keeps parameter names, weight
tying and state_dict keys unchanged. Each weight is reordered once into oneDNN's blocked layout
(`_reorder_linear_weight`), which oneDNN would otherwise work around on every call; results are bit-identical to the
plain layout from 4 rows and about 1e-6 apart at 1 row (another kernel), as MKL's are.

A weight another module shares stays plain, since the other module reads it as it is: a tied output projection
shares the embedding matrix, which the embedding looks rows up in. Such a Linear can multiply by a packed copy of its
own (`pack_shared`), at the memory of a second vocabulary × d_model matrix.

oneDNN reads a packed weight slower for one or two rows than for the PACKED_FOR_ROWS it was packed for, so such
products run padded with zero rows to that many (`padded`; each row is computed alike, bit for bit). At one row
(greedy decoding of one sequence) MKL and oneDNN run a matrix-vector product on one thread, at one core's bandwidth,
so a tied projection also keeps its matrix transposed (`row_copy`) and multiplies one row as a batched product over
slices of the input dimension, spread over the intra-op threads, then summed (`one_row_product`; logits within float
rounding of the packed product's; no copy with one intra-op thread at load). Measurements: loadtests/README.md.
"""

from __future__ import annotations

from collections import Counter
from typing import List, Optional, Union

import torch
import torch.nn.functional as F
from torch import nn

from .layers import fixed_in_trace

PACKED_FOR_ROWS = 4  # the batch size the layout is chosen for; 32 measured the same within noise at 1–128 rows
PADDED_ROWS = 2  # products over this many rows or fewer run padded to PACKED_FOR_ROWS rows (above)


class OneDNNLinear(nn.Linear):
    """weight is plain (out, in) or packed (oneDNN's layout, torch._mkldnn): the op takes either. The buffer
    packed_copy, when not None, is what it multiplies by instead: a packed copy of a plain weight that another module
    shares (a buffer, not an attribute, so that a trace reads it from the module: model.traced_step); row_copy,
    beside it, the same matrix transposed, for one row."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = fixed_in_trace(x.numel() // x.shape[-1])
        if self.row_copy is not None and rows == 1:
            return one_row_product(x, self.row_copy, self.bias, self.row_splits)
        weight = self.weight if self.packed_copy is None else self.packed_copy
        if not padded(rows):
            return _product(x, weight, self.bias)
        y = _product(F.pad(x.reshape(rows, self.in_features), (0, 0, 0, PACKED_FOR_ROWS - rows)), weight, self.bias)
        return y[:rows].view(*x.shape[:-1], self.out_features)


def _product(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
    if torch.jit.is_tracing():
        return _linear_pointwise(x, weight, bias)
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


@torch.jit.script
def _linear_pointwise(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
    """The op as a trace records it: the tracer takes no empty list of optional scalars from Python, so the call
    comes from TorchScript, which types the list as the op's (a Union of the three number types is its `number`)."""
    no_scalars: List[Optional[Union[int, float, complex]]] = []
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", no_scalars, "")


def padded(rows) -> bool:
    """Whether a product over `rows` rows runs padded with zero rows to PACKED_FOR_ROWS (a choice per trace:
    layers.fixed_in_trace)."""
    return 0 < fixed_in_trace(rows) <= PADDED_ROWS


def one_row_product(x: torch.Tensor, weight_t: torch.Tensor, bias: torch.Tensor | None,
                    splits: int) -> torch.Tensor:
    """x (..., in) holding one row, times weight_t (in, out), plus bias: a batched product over `splits` slices of
    the input dimension (row_splits: one per intra-op thread), summed."""
    d_in, d_out = weight_t.shape
    parts = torch.bmm(x.reshape(splits, 1, d_in // splits), weight_t.view(splits, d_in // splits, d_out))
    y = parts.sum(0)  # (1, out)
    return (y if bias is None else y + bias).view(*x.shape[:-1], d_out)


def row_splits(d_in: int) -> int:
    """Slices of the input dimension for one_row_product: the intra-op threads (at least 2), halved until they
    divide it."""
    splits = max(2, torch.get_num_threads())
    while d_in % splits:
        splits //= 2
    return splits


def _packed(weight: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), PACKED_FOR_ROWS)


def use_onednn_linears(model: nn.Module, enable: bool = True, pack_shared: bool = True) -> nn.Module:
    """Route every Linear of a float32 or bfloat16 CPU model through oneDNN with packed weights (enable=False switches them
    back to nn.Linear with plain weights). A weight other modules share stays as it is; with pack_shared its
    Linear gets a packed copy, and with more than one intra-op thread a transposed one for one row (two more
    matrices in memory)."""
    if enable and not torch.backends.mkldnn.is_available():
        return model
    old, new = (nn.Linear, OneDNNLinear) if enable else (OneDNNLinear, nn.Linear)
    owners = Counter(id(p) for m in model.modules() for p in m._parameters.values() if p is not None)
    for module in model.modules():
        if type(module) is not old:
            continue
        module.__class__ = new
        weight = module.weight
        if enable:
            shared = owners[id(weight)] > 1
            if not shared:
                module.weight = nn.Parameter(_packed(weight), requires_grad=False)
            copies = shared and pack_shared
            # one thread has nothing to spread a row over; bfloat16's bmm is slower than its packed product
            sliced = copies and torch.get_num_threads() > 1 and weight.dtype == torch.float32
            module.register_buffer("packed_copy", _packed(weight) if copies else None, persistent=False)
            module.register_buffer("row_copy", weight.detach().t().contiguous() if sliced else None,
                                   persistent=False)
            module.row_splits = row_splits(module.in_features) if sliced else None
        else:
            module._buffers.pop("packed_copy", None)
            module._buffers.pop("row_copy", None)
            module.__dict__.pop("row_splits", None)
            if weight.layout == torch._mkldnn:
                module.weight = nn.Parameter(weight.to_dense(), requires_grad=False)
    return model
