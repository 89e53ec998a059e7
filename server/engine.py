"""The engine executes a plan on the model: drop cancelled rows, encode admitted requests, one decoder step."""

from __future__ import annotations

from model import BatchDecoder, Seq2SeqTransformer, StepEvent

from .scheduler import Plan


class Engine:
    def __init__(self, network: Seq2SeqTransformer, max_rows: int, max_input_tokens: int, max_new_tokens: int):
        self.network = network
        self.max_rows, self.max_input_tokens, self.max_new_tokens = max_rows, max_input_tokens, max_new_tokens
        self.reset()

    def reset(self) -> None:
        """A fresh batch (after a failed step: whatever was in flight is gone)."""
        self.decoder = BatchDecoder(self.network, capacity=self.max_rows, max_source_len=self.max_input_tokens,
                                    max_new_tokens=self.max_new_tokens)

    @property
    def rows_in_use(self) -> int:
        return self.decoder.live_rows

    def execute(self, plan: Plan) -> list[StepEvent]:
        for request in plan.cancel:
            self.decoder.cancel(request.id)
        if plan.admit:
            self.decoder.admit([(r.id, r.source_ids, r.params) for r in plan.admit])
        return self.decoder.step()
