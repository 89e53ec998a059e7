"""int8 dynamic quantization for CPU inference: Linear weights stored as int8, activations quantized per step.

Uses torch.ao's dynamic quantization (deprecated upstream in favour of torchao, still shipped and working in
torch 2.13). Embeddings stay float; the output projection gets its own int8 copy of the tied weight. In place: the
float weights of each Linear are freed as it is quantized, never copied as a whole model first.
"""

from __future__ import annotations

import warnings

import torch
from torch import nn

from .cpu_kernels import use_onednn_linears
from .transformer import Seq2SeqTransformer


def quantize_int8(model: Seq2SeqTransformer) -> Seq2SeqTransformer:
    if model.device.type != "cpu" or model.dtype != torch.float32:
        raise ValueError("int8 dynamic quantization needs a float32 model on the CPU")
    use_onednn_linears(model, enable=False)  # torch.ao quantizes plain nn.Linear modules only
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantized = torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8, inplace=True)
    return quantized
