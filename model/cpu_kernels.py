"""float32 matmuls on the CPU through oneDNN instead of torch's default (MKL) path, on weights laid out for it.

torch sends a float32 nn.Linear to MKL's sgemm; on this project's benchmark machine (AMD EPYC, AVX-512) oneDNN's
kernel, which torch ships and uses for bfloat16 anyway, is about twice as fast at every decoding shape
(output projection 512 → 58,101: 4.3 → 2.9 ms at 1 row, 18.6 → 8.2 ms at 32 rows) with the same float32
accumulation. Switching the class keeps parameter names, weight tying and state_dict keys unchanged.

Each weight is then reordered once into oneDNN's blocked layout (`_reorder_linear_weight`), which otherwise
oneDNN would work around on every call: measured with weights read from memory, as a decoder step reads them,
768 → 32,128 at 4 rows 3.8 → 1.6 ms and at 32 rows 7.8 → 5.3 ms, 768 → 4,096 at 4 rows 0.44 → 0.32 ms, and never
slower from 1 to 2,048 rows. Results are bit-identical to the plain layout from 4 rows; at 1 row they differ by
about 1e-6 (another kernel), as MKL's do.

A weight another module shares stays plain, since the other module reads it as it is: a tied output projection
shares the embedding matrix, which the embedding looks rows up in. Such a Linear can multiply by a packed copy
of its own (`pack_shared`), at the memory of a second matrix (vocabulary × d_model × 4 bytes: 119 MB for
opus-mt-en-de, 1.05 GB for NLLB-200-600M). Measured in one process, alternately with and without the copy, ms per
batch of 32 new tokens: opus-mt-en-de shape greedy batch 1 / 8 / 32 264 → 241, 393 → 327, 867 → 751, beam 4
batch 1 / 32 344 → 246, 2,204 → 2,072; NLLB-600M shape greedy batch 1 / 8 1,265 → 1,071, 2,568 → 1,795; the same
outputs.

oneDNN's kernel reads a packed weight slower for one or two rows than for the PACKED_FOR_ROWS it was packed for,
so such products run padded with zero rows to that many and keep their own rows (the same numbers, bit for bit:
each row is computed alike in both kernels). Measured on 2 cores, weights read from memory, µs per call, unpadded →
padded: 768 → 4,096 at 1 row 504 → 457 and at 2 rows 586 → 478, 2,048 → 768 269 → 211 and 272 → 210, 768 →
2,304 259 → 222 and 307 → 223 (768 → 768 alike; 3 rows gain nothing). A flan-T5-base-shaped decoder step,
alternating processes: batch 1 23.0 / 22.7 / 22.4 → 21.6 / 20.2 / 19.0 ms, batch 2 25.9 / 26.1 → 21.0 / 20.8 ms.

At one row (greedy decoding of one sequence) the product is a matrix-vector product, which MKL and oneDNN run on
one thread: an output projection read from memory at one core's bandwidth. Such a tied projection therefore also
keeps its matrix transposed (`row_copy`, in × out, another vocabulary × d_model × 4 bytes) and multiplies one row
as a batched product over slices of the input dimension, which torch spreads over the intra-op threads, then sums
the slices (`one_row_product`; with one intra-op thread at load, as a CPU server's engine threads on 2 cores have,
there is nothing to spread it over and no copy is made). Measured on 2 cores, 512 → 58,101 (opus-mt-en-de) at one
row: oneDNN 4.2 ms, MKL 10.5 ms, the sliced product 2.2 ms (54 GB/s; a sum over the same matrix reads at 73); from
2 rows oneDNN's packed layout is faster again (4 rows: 6.7 against 8.8 ms), and for the decoder layers' own
matrices (1–7 MB) the sliced product gains nothing (padded, above, they are as fast). Its sum runs in another
order: logits within float rounding of the packed product's.
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
    """Route every Linear of a float32 CPU model through oneDNN with packed weights (enable=False switches them
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
            sliced = copies and torch.get_num_threads() > 1  # one thread has nothing to spread a row over
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
