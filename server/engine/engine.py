"""The engine executes a plan on the model: drop cancelled rows, encode admitted sequences, one decoder step.

Admitted sequences are encoded in a thread of their own while the running batch takes its decoder step, and join
the batch at the next step: encoder passes for new arrivals (about half the work on short texts) no longer stall
everyone else's decoding, and the two threads use two cores without one intra-op thread pool spinning across
both. When nothing else is decoding, the engine waits for the encoder instead, so a lone sequence is not delayed.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable

from model import BatchDecoder, Encoded, Seq2SeqTransformer, StepEvent

from .scheduler import Plan


class Engine:
    def __init__(self, network: Seq2SeqTransformer, max_rows: int, max_input_tokens: int, max_new_tokens: int,
                 static_shapes: bool = False):
        self.network, self.static_shapes = network, static_shapes
        self.max_rows, self.max_input_tokens, self.max_new_tokens = max_rows, max_input_tokens, max_new_tokens
        self.encoder = ThreadPoolExecutor(1, thread_name_prefix="encoder")
        self.reset()

    def reset(self) -> None:
        """A fresh batch (after a failed step: whatever was in flight is gone, an encoding under way too)."""
        self.decoder = BatchDecoder(self.network, capacity=self.max_rows, max_source_len=self.max_input_tokens,
                                    max_new_tokens=self.max_new_tokens, static_shapes=self.static_shapes)
        self.encoding: Future[Encoded] | None = None
        self.encoding_rows = 0
        self.dropped: set = set()  # keys cancelled while their encoding ran

    @property
    def rows_in_use(self) -> int:
        return self.decoder.live_rows + self.encoding_rows

    def execute(self, plan: Plan) -> list[StepEvent]:
        for sequence in plan.cancel:
            self.decoder.cancel(sequence.id)
            self.dropped.add(sequence.id)
        self._join()
        if plan.admit:
            entries = [(s.id, s.encoder_input, s.params) for s in plan.admit]
            self.encoding = self.encoder.submit(self.decoder.encode, entries)
            self.encoding_rows = sum(s.rows for s in plan.admit)
            if not self.decoder.searches:  # nobody to decode meanwhile
                self._join()
        return self.decoder.step()

    def beside_decoding(self, work: Callable, *args) -> Future:
        """Other torch work on this model (word alignments) in the encoder's thread: beside the decoder steps, and
        no third thread with an OpenMP team of its own (see runtime.process.in_passing_thread)."""
        return self.encoder.submit(work, *args)

    def _join(self) -> None:
        """The encoding under way (if any) joins the batch; waits for it. Its errors are raised here."""
        if self.encoding is None:
            self.dropped.clear()
            return
        encoding, self.encoding, self.encoding_rows = self.encoding, None, 0
        encoded = encoding.result()
        self.decoder.join(encoded, frozenset(self.dropped))
        self.dropped.clear()

    def close(self) -> None:
        self.encoder.shutdown(wait=True)
