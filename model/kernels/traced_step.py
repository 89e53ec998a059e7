"""The network's stacks as TorchScript traces on the CPU: the decoder step's layers, the encoder's layers and the
cross-attention key/value projections, each one call into C++ instead of dozens to hundreds of operators
dispatched from Python one by one.

Two costs go: Python's per-operator overhead, and the interpreter lock. An eager step lets the lock go and takes
it back around every operator, so any other thread of the process that holds it (the encoder thread, the engine
process's pipe threads, an event loop) makes the step wait at each of them; a traced step takes it once.

A trace records the operators of one run and keeps the sizes symbolic. The stacks have no Python branch on the row
count, the target length or the source length other than the padding of products over one or two rows
(cpu_kernels.padded), so one trace per choice serves every shape: a float32 or bfloat16 model's decoder step gets
three (one row, two, more), an int8 one a single one. (bfloat16's products in blocks of rows are a loop inside the
trace: cpu_kernels._blocked_product.) Tracing fails on the tracer's warning that a trace may not generalize (a
Python value taken from a traced size) rather than serve such a trace.

The traces share the network's weights (the graphs and TorchScript itself take tens of MB more resident memory);
they are taken once the weights are final (load() on the CPU, after oneDNN packing or int8 quantization), so a
network changed after that must be traced again.
TorchScript is deprecated upstream for torch.compile and torch.export, but neither runs a graph outside Python on a
CPU without a C++ toolchain, and inductor-compiled steps were slower here (loadtests/README.md, bench_step); torch
2.13 ships it, and the tests hold every traced stack to the eager one, bit for bit.
"""

from __future__ import annotations

import warnings

import torch

from ..network.transformer import Seq2SeqTransformer
from .cpu_kernels import PADDED_ROWS, OneDNNLinear, padded


class Traced:
    """The network's stacks, traced: decoder_stack, encoder_stack and memory_projections, called as the network's
    own. Each call runs the trace that takes the branches the eager code would take at that shape."""

    def __init__(self, network: Seq2SeqTransformer):
        self.network = network
        self.pads = any(isinstance(module, OneDNNLinear) for module in network.modules())  # padded products
        self.traces: dict[int, torch.jit.ScriptModule] = {}  # a step's padded rows (0: none) → its trace
        for rows in (PADDED_ROWS + 1, *range(1, PADDED_ROWS + 1)):
            key = self._padded_rows(rows)
            if key not in self.traces:
                self.traces[key] = _trace(network, rows, with_encoder=not self.traces)
        self.encoder = self.traces[0]  # the trace holding the encoder's stacks (unpadded)

    def _padded_rows(self, rows: int) -> int:
        """The rows a decoder step of `rows` rows pads its products from, 0 for none."""
        return rows if self.pads and padded(rows) else 0

    def decoder_stack(self, x: torch.Tensor, *inputs: torch.Tensor) -> torch.Tensor:
        return self.traces[self._padded_rows(x.shape[0])].decoder_stack(x, *inputs)

    def encoder_stack(self, x: torch.Tensor, attn_mask: torch.Tensor) -> torch.Tensor:
        """Products are traced unpadded: an encoder pass is never one or two rows (layers.attended_length)."""
        return self.encoder.encoder_stack(x, attn_mask)

    def memory_projections(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.encoder.memory_projections(memory)


def _trace(network: Seq2SeqTransformer, rows: int, with_encoder: bool) -> torch.jit.ScriptModule:
    """decoder_stack traced on a step of `rows` rows at the second position of a scratch cache; with_encoder, the
    encoder's stack and memory projections too, on 2 sources of 3 tokens."""
    device, d_model = network.device, network.config.d_model
    cache = network.new_cache(rows, max_target_len=2, max_source_len=3)
    tokens = torch.full((rows,), network.config.decoder_start_token_id, device=device)
    positions = torch.ones(rows, dtype=torch.long, device=device)
    methods = {"decoder_stack": network.step_inputs(cache, tokens, positions, target_len=2, source_len=3)}
    if with_encoder:
        embedded = torch.randn(2, 3, d_model, dtype=network.dtype, device=device)
        mask = torch.ones(2, 1, 1, 3, dtype=torch.bool, device=device)
        if network.encoder_relative_bias is not None:  # T5's mask is its bias (Seq2SeqTransformer.encode)
            mask = network.encoder_relative_bias(3).expand(2, -1, -1, -1)
        methods["encoder_stack"] = (embedded, mask)
        methods["memory_projections"] = (embedded,)
    with warnings.catch_warnings(record=True) as caught:
        warnings.filterwarnings("ignore", r"`torch\.jit\.\w+` is deprecated", DeprecationWarning)  # see above
        warnings.simplefilter("always", torch.jit.TracerWarning)  # a value the trace would keep fixed
        traced = torch.jit.trace_module(network, methods, check_trace=False)
    fixed = [w for w in caught if issubclass(w.category, torch.jit.TracerWarning)]
    if fixed:
        raise RuntimeError(f"the trace would keep a shape fixed ({fixed[0].filename}:{fixed[0].lineno}): "
                           f"{fixed[0].message}")
    return traced


def trace_stacks(network: Seq2SeqTransformer) -> Seq2SeqTransformer:
    """The network with its stacks traced (CPU networks; others are returned as they are)."""
    if network.device.type == "cpu":
        with torch.inference_mode():
            network.traced = Traced(network)
    return network
