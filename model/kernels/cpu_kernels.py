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
products run padded with zero rows to that many (`padded`).

A row's product must not depend on the other rows of its step (batch invariance: a text's translation does not
depend on what else is in flight). oneDNN's float32 kernel gives a row the same numbers at every row count; its
bfloat16 one (measured with AMX) picks its blocking of the input dimension by the row count, so a row comes out
one rounding apart inside 33 rows or more from what it is alone. bfloat16 products over more than BLOCK_ROWS rows
therefore run BLOCK_ROWS rows at a time (`_blocked_product`), the row counts at which every row comes out as it
does alone (tests/model/test_batch_invariance.py holds every product to that, row by row, at every row count).
"""

from __future__ import annotations

from collections import Counter
from typing import List, Optional, Union

import torch
import torch.nn.functional as F
from torch import nn

from ..network.layers import fixed_in_trace

PACKED_FOR_ROWS = 4  # the batch size the layout is chosen for; 32 measured the same within noise at 1–128 rows
PADDED_ROWS = 2  # products over this many rows or fewer run padded to PACKED_FOR_ROWS rows (above)
BLOCK_ROWS = 32  # bfloat16 products over more rows run this many rows at a time (above)


class OneDNNLinear(nn.Linear):
    """weight is plain (out, in) or packed (oneDNN's layout, torch._mkldnn): the op takes either. The buffer
    packed_copy, when not None, is what it multiplies by instead: a packed copy of a plain weight that another module
    shares (a buffer, not an attribute, so that a trace reads it from the module: model.kernels.traced_step)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = fixed_in_trace(x.numel() // x.shape[-1])
        weight = self.weight if self.packed_copy is None else self.packed_copy
        if padded(rows):
            y = _product(F.pad(x.reshape(rows, self.in_features), (0, 0, 0, PACKED_FOR_ROWS - rows)), weight,
                         self.bias)[:rows]
        elif weight.dtype == torch.bfloat16:
            y = _blocked_product(x.reshape(-1, self.in_features), weight, self.bias, BLOCK_ROWS)  # (M, out)
        else:
            return _product(x, weight, self.bias)
        return y.view(*x.shape[:-1], self.out_features)


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


@torch.jit.script
def _blocked_product(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                     block: int) -> torch.Tensor:
    """x (M, in) times the weight, at most `block` rows at a time: scripted, so that one trace runs it at any M."""
    if x.shape[0] <= block:
        return _linear_pointwise(x, weight, bias)
    return torch.cat([_linear_pointwise(rows, weight, bias) for rows in x.split(block)])


def _packed(weight: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), PACKED_FOR_ROWS)


def use_onednn_linears(model: nn.Module, enable: bool = True, pack_shared: bool = True) -> nn.Module:
    """Route every Linear of a float32 or bfloat16 CPU model through oneDNN with packed weights (enable=False switches
    them back to nn.Linear with plain weights). A weight other modules share stays as it is; with pack_shared its
    Linear gets a packed copy (one more matrix in memory)."""
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
            module.register_buffer("packed_copy", _packed(weight) if copies else None, persistent=False)
        else:
            module._buffers.pop("packed_copy", None)
            if weight.layout == torch._mkldnn:
                module.weight = nn.Parameter(weight.to_dense(), requires_grad=False)
    return model
