"""Word alignment from the decoder's cross-attention, for putting inline tags back around the right words.

    word_alignments(bundle, [AlignmentInput(unit, source.ids, hypothesis.token_ids)])  # → [[(src word, tgt word)]]

A teacher-forced pass over (source ids, generated ids) gives one decoder layer's cross-attention averaged over its
heads, row t being the attention while the model predicted generated token t. Tokens are matched to the words of
the texts (model/text/inline.py word_spans) through what each token spells (Tokenizer.token_bytes); each target
word is aligned with the source word whose tokens its tokens attend to most in sum. Language tokens, </s>, a
forced first token and other special tokens spell nothing in the text and belong to no word.

Dimensions: B units, S source length, T generated length, H heads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from .loading.bundle import ModelBundle
from .network.transformer import Seq2SeqTransformer
from .text.inline import Alignment, token_words, word_spans

UNITS_PER_PASS = 16  # units aligned in one padded forward pass: bounds the (B, H, T, S) weights held at once


@dataclass(frozen=True)
class AlignmentInput:
    source_text: str  # the unit as translated
    source_ids: list[int]  # its encoder ids (language tokens and </s> included)
    target_ids: list[int]  # the generated ids (forced first token and </s> included), as a Hypothesis holds them


def cross_attentions(network: Seq2SeqTransformer, pairs: Sequence[tuple[list[int], list[int]]],
                     layer: int) -> list[torch.Tensor]:
    """Head-averaged cross-attention (T, S) of decoder layer `layer` for each (source ids, generated ids): row t
    is what the decoder attended to while predicting generated token t (its input: the start token, then the
    generated tokens before t)."""
    config, out = network.config, []
    for first in range(0, len(pairs), UNITS_PER_PASS):
        batch = pairs[first:first + UNITS_PER_PASS]
        src, src_mask = _padded([s for s, _ in batch], config.pad_token_id, network.device)
        tgt, _ = _padded([[config.decoder_start_token_id, *t[:-1]] for _, t in batch], config.pad_token_id,
                         network.device)
        with torch.inference_mode():
            weights = network.cross_attention(src, src_mask, tgt, layer).mean(1).cpu()  # (B, T, S)
        out += [weights[i, :len(t), :len(s)] for i, (s, t) in enumerate(batch)]
    return out


def word_alignment(attention: torch.Tensor, source_words: list[list[int]], target_words: list[list[int]],
                   n_source: int, n_target: int) -> Alignment:
    """attention (T, S) between tokens → (source word, target word) pairs: each target word that has tokens goes
    with the source word its tokens attend to most, summed over both words' tokens."""
    source_map = torch.zeros(len(source_words), n_source)  # (S, source words)
    for s, words in enumerate(source_words):
        source_map[s, words] = 1.0
    target_map = torch.zeros(len(target_words), n_target)  # (T, target words)
    for t, words in enumerate(target_words):
        target_map[t, words] = 1.0
    if n_source == 0:
        return []
    scores = target_map.T @ attention.float() @ source_map  # (target words, source words)
    return [(int(scores[w].argmax()), w) for w in range(n_target) if target_map[:, w].any()]


def word_alignments(bundle: ModelBundle, units: Sequence[AlignmentInput], layer: int | None = None) -> list[Alignment]:
    """The word alignment of each unit with its translation (the text bundle.decode gives for target_ids)."""
    if not units:
        return []
    network, tokenizer = bundle.network, bundle.tokenizer
    layer = network.alignment_layer if layer is None else layer
    attentions = cross_attentions(network, [(u.source_ids, u.target_ids) for u in units], layer)
    out = []
    for unit, attention in zip(units, attentions):
        target_text = bundle.decode(unit.target_ids)
        source = token_words(unit.source_text, tokenizer.token_bytes(unit.source_ids, source=True))
        target = token_words(target_text, tokenizer.token_bytes(unit.target_ids))
        out.append(word_alignment(attention, source, target, len(word_spans(unit.source_text)),
                                  len(word_spans(target_text))))
    return out


def _padded(rows: list[list[int]], pad: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows padded on the right → ids (B, L) and mask (B, L), True on real tokens."""
    ids = torch.full((len(rows), max(map(len, rows))), pad, dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, :len(row)] = torch.tensor(row, dtype=torch.long)
    mask = torch.arange(ids.shape[1])[None, :] < torch.tensor([len(r) for r in rows])[:, None]
    return ids.to(device), mask.to(device)
