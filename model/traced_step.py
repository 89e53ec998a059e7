"""The network's stacks as TorchScript traces on the CPU: the decoder step's layers, the encoder's layers and the
cross-attention key/value projections, each one call into C++ instead of dozens to hundreds of operators
dispatched from Python one by one.

Two costs go: Python's per-operator overhead, and the interpreter lock. An eager step lets the lock go and takes
it back around every operator, so any other thread of the process that holds it (the encoder thread, the engine
process's pipe threads, an event loop) makes the step wait at each of them; a traced step takes it once.

A trace records the operators of one run and keeps the sizes symbolic. The stacks have no Python branch on the row
count, the target length or the source length other than attention's choice of kernel (layers.attends_by_matmul),
the padding of products over one or two rows (cpu_kernels.padded) and the output projection's one-row product, so
one trace per choice serves every shape: a float32 or bfloat16 model's decoder step gets four (one row, two, fewer
than MATMUL_ATTENTION_MIN_ROWS rows, and that many or more), an int8 one three (the third from
quantize.WIDE_ROWS rows, its output projection's oneDNN packing). Tracing fails on the tracer's warning
that a trace may not generalize (a Python value taken from a traced size) rather than serve such a trace.

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

from .cpu_kernels import PADDED_ROWS, OneDNNLinear, padded
from .layers import MATMUL_ATTENTION_MIN_ROWS, attends_by_matmul
from .quantize import WIDE_ROWS, Int8Output
from .transformer import Seq2SeqTransformer


class Traced:
    """The network's stacks, traced: decoder_stack, encoder_stack and memory_projections, called as the network's
    own. Each call runs the trace that takes the branches the eager code would take at that shape."""

    def __init__(self, network: Seq2SeqTransformer):
        self.network = network
        self.pads = any(isinstance(module, OneDNNLinear) for module in network.modules())  # padded products
        self.wide_output = isinstance(network.lm_head, Int8Output)
        self.traces: dict[tuple[bool, int, bool], torch.jit.ScriptModule] = {}  # a step's _branches → its trace
        # one step of each kind: padded (2, 1), the fewest rows neither padded nor attending by matmul, by matmul,
        # with an int8 output projection's wide packing
        for rows in (2, 1, PADDED_ROWS + 1, MATMUL_ATTENTION_MIN_ROWS, WIDE_ROWS):
            key = self._branches(rows)
            if key not in self.traces:
                self.traces[key] = _trace(network, rows, with_encoder=not self.traces)
        self.encoder = next(iter(self.traces.values()))  # the trace holding the encoder's stacks (6 rows)

    def _branches(self, rows: int) -> tuple[bool, int, bool]:
        """(attention through matmuls, the rows its products are padded from, 0 for none, an int8 output projection
        through its wide packing) of a decoder step of `rows` rows. One row is always its own key where products
        are padded: it is also where an output projection with a row_copy takes one_row_product (a row copy exists
        only on a OneDNNLinear)."""
        # a step attends over its cache in the cache's dtype (float32 under bfloat16 on the CPU)
        matmul = attends_by_matmul(rows, 1, self.network.cache_dtype, self.network.device)
        return matmul, rows if self.pads and padded(rows) else 0, self.wide_output and rows >= WIDE_ROWS

    def decoder_stack(self, x: torch.Tensor, *inputs: torch.Tensor) -> torch.Tensor:
        return self.traces[self._branches(x.shape[0])].decoder_stack(x, *inputs)

    def encoder_stack(self, x: torch.Tensor, attn_mask: torch.Tensor) -> torch.Tensor:
        """Traced with attention through SDPA; a batch of one-token sources that eager code attends to by matmul
        (that many rows, float32) runs eagerly. Products are traced unpadded (6 rows): a source of one or two
        tokens, which eager code pads, computes the same numbers slower."""
        if attends_by_matmul(x.shape[0], x.shape[1], self.network.dtype, self.network.device):
            return self.network.encoder_stack(x, attn_mask)
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
        methods["encoder_stack"] = (embedded, torch.ones(2, 1, 1, 3, dtype=torch.bool, device=device))
        methods["memory_projections"] = (embedded,)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("ignore", DeprecationWarning)  # TorchScript's: see above
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
