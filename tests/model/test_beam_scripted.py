"""Beam search driven by a scripted fake decoder (as fairseq's tests drive theirs): each step's distribution over a
six-token vocabulary is a fixed function of the hypothesis so far. Our BeamSearch, stepped by advance_beams alone
(no network, no batch decoder), and transformers' beam search in `generate` on a model whose logits are the same
script must return the same hypotheses with the same scores: </s> at different steps, length penalties, every
early-stopping mode, several searches stepping together."""

import itertools

import pytest
import torch
from transformers import MarianConfig, MarianMTModel
from transformers.modeling_outputs import Seq2SeqLMOutput

from model import DecodeParams
from model.decoding.search import BeamSearch, advance_beams

START, EOS, VOCAB = 0, 1, 6  # 0 is also <pad>, never produced


def scripted(prefix: tuple[int, ...], seed: int) -> torch.Tensor:
    """(V,) logits after `prefix` (the generated tokens): random but fixed per prefix and seed, with
    </s> likelier as the prefix grows; <pad> impossible. (No exact ties: which of two tied candidates topk returns
    first is torch's choice, and differs between transformers' k·V and our k·W candidates.)"""
    generator = torch.Generator().manual_seed(hash((seed,) + prefix) % 2**31)
    logits = torch.randn(VOCAB, generator=generator) * 2
    logits[EOS] += len(prefix) - 1.5
    logits[START] = float("-inf")
    return logits


class ScriptedMarian(MarianMTModel):
    """A Marian whose decoder is the script: its logits at every position are the script's after that prefix."""

    seed = 0

    def forward(self, input_ids=None, attention_mask=None, decoder_input_ids=None, encoder_outputs=None, **kwargs):
        rows = [[scripted(tuple(row[1:t + 1].tolist()), self.seed) for t in range(row.shape[0])]
                for row in decoder_input_ids]
        return Seq2SeqLMOutput(logits=torch.stack([torch.stack(r) for r in rows]))  # (B, T, V)


@pytest.fixture(scope="module")
def reference():
    config = MarianConfig(vocab_size=VOCAB, d_model=8, encoder_layers=1, decoder_layers=1, encoder_attention_heads=1,
                          decoder_attention_heads=1, encoder_ffn_dim=8, decoder_ffn_dim=8, pad_token_id=START,
                          eos_token_id=EOS, decoder_start_token_id=START, max_position_embeddings=32)
    return ScriptedMarian(config).eval()


def theirs(model, seed: int, params: DecodeParams) -> list[tuple[list[int], float]]:
    model.seed = seed
    out = model.generate(torch.tensor([[2, 3, EOS]]), num_beams=params.num_beams, use_cache=False,
                         num_return_sequences=params.num_return_sequences, max_new_tokens=params.max_new_tokens,
                         length_penalty=params.length_penalty, early_stopping=params.early_stopping, do_sample=False,
                         bad_words_ids=None, forced_eos_token_id=None, output_scores=True,
                         return_dict_in_generate=True)
    hypotheses = []
    for row, score in zip(out.sequences.tolist(), out.sequences_scores.tolist()):
        tokens = row[1:]
        hypotheses.append((tokens[:tokens.index(EOS) + 1] if EOS in tokens else tokens, score))
    return hypotheses


def ours(searches: dict[int, BeamSearch]) -> dict[int, list[tuple[list[int], float]]]:
    """Step every search together on the script until each is done (a finished search leaves the batch)."""
    while live := [(seed, s) for seed, s in searches.items() if not s.done]:
        logits = torch.stack([scripted(tuple(s.sequence(beam)), seed)
                              for seed, s in live for beam in range(s.params.num_beams)])  # (sum of beams, V)
        top_logprobs, top_tokens = torch.log_softmax(logits, -1).sort(dim=-1, descending=True)
        advance_beams([s for _, s in live], top_logprobs, top_tokens)
    return {seed: [(h.token_ids, h.score) for h in s.results()] for seed, s in searches.items()}


CASES = [DecodeParams(max_new_tokens=new, num_beams=k, num_return_sequences=n, length_penalty=penalty,
                      early_stopping=stop)
         for (k, n), new, penalty, stop in itertools.product(((2, 2), (3, 1), (4, 3)), (6,), (1.0, 0.6, 2.0),
                                                             (False, True, "never"))]


@pytest.mark.parametrize("params", CASES, ids=lambda p: f"k{p.num_beams}n{p.num_return_sequences}new"
                         f"{p.max_new_tokens}lp{p.length_penalty}stop{p.early_stopping}")
def test_hypotheses_and_scores_equal_transformers_on_a_scripted_decoder(reference, params):
    seeds = range(6)
    got = ours({seed: BeamSearch(params, EOS, START, source_len=3) for seed in seeds})  # six searches at once
    for seed in seeds:
        assert got[seed] == theirs(reference, seed, params), seed
