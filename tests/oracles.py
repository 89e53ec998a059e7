"""Oracles shared by tests: cached decoding equals full teacher-forced re-decoding (every family); the target
words an inline tag must wrap, given a word alignment (documents)."""

import torch

from model.text.inline import word_spans


def assert_cached_steps_equal_full(model, sources: list[list[int]], steps: int = 12, atol: float = 1e-4) -> None:
    """Greedy decoding on the KV cache gives, at every step, the logits of a full teacher-forced pass over the
    prefix (the continuation never feeds <pad>, where transformers' own two position counts differ)."""
    pad = model.config.pad_token_id
    src = torch.full((len(sources), max(map(len, sources))), pad)
    for i, ids in enumerate(sources):
        src[i, : len(ids)] = torch.tensor(ids)
    mask = src != pad
    cache = model.new_cache(len(sources), steps + 1, src.shape[1])
    with torch.inference_mode():
        k, v = model.cross_kv(model.encode(src, mask))
        cache.write_source(0, k, v, mask)
        prefix = torch.full((len(sources), 1), model.config.decoder_start_token_id)
        for t in range(steps):
            cached, _ = model.decode_step(cache, prefix[:, -1], torch.full((len(sources),), t), t + 1, src.shape[1])
            full = model(src, mask, prefix)[:, -1]
            torch.testing.assert_close(cached, full, atol=atol, rtol=1e-4)
            cached[:, pad] = float("-inf")
            prefix = torch.cat([prefix, cached.argmax(-1, keepdim=True)], dim=1)


def aligned_span(source: str, wrapped: str, target: str, alignment) -> str:
    """The words of `target` an inline tag around the words `wrapped` of `source` must wrap: from the first to the
    last target word the alignment gives those source words (the alignment taken as monotone)."""
    start = source.index(wrapped)
    inside = [i for i, (s, e) in enumerate(word_spans(source)) if start <= s and e <= start + len(wrapped)]
    targets = sorted(t for s, t in alignment if s in inside)
    assert targets, f"no target word aligned with {wrapped!r}: the example proves nothing"
    words = word_spans(target)
    return target[words[targets[0]][0]:words[targets[-1]][1]]
