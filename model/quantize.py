"""int8 dynamic quantization for CPU inference: Linear weights stored as int8, activations quantized per step.

Uses torch.ao's dynamically quantized Linear (deprecated upstream in favour of torchao, still shipped and working in
torch 2.13) with a scale per output channel (as CTranslate2's int8): a fused projection (Q, K and V stacked) with one
scale per matrix would round its smallest part coarsely. Embeddings stay float; the
output projection gets its own int8 copy of the tied weight. Each Linear is swapped for its int8 one in place, so its
float weight is freed there: quantize_dynamic leaves every Linear it replaced in a reference cycle (its qconfig's
observer factory closes over the module), alive until the next full garbage collection.
"""

from __future__ import annotations

import warnings

import torch
from torch import nn
from torch.ao.nn.quantized.dynamic import Linear as Int8Linear
from torch.ao.quantization import per_channel_dynamic_qconfig

from .cpu_kernels import use_onednn_linears
from .cpu_memory import release_freed_memory
from .transformer import Seq2SeqTransformer


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


def quantize_int8(model: Seq2SeqTransformer) -> Seq2SeqTransformer:
    """The model's Linear layers (those load_network has not quantized yet) as int8."""
    if model.device.type != "cpu" or model.dtype != torch.float32:
        raise ValueError("int8 dynamic quantization needs a float32 model on the CPU")
    use_onednn_linears(model, enable=False)  # int8 replaces plain nn.Linear modules only
    quantize_linears(model)
    return model
