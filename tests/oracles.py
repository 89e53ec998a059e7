"""The KV-cache oracle shared by every family's tests: cached decoding equals full teacher-forced re-decoding."""

import torch


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
        cache.write_source(torch.arange(len(sources)), k, v, mask)
        prefix = torch.full((len(sources), 1), model.config.decoder_start_token_id)
        for t in range(steps):
            cached = model.decode_step(cache, prefix[:, -1], torch.full((len(sources),), t), t + 1, src.shape[1])
            full = model(src, mask, prefix)[:, -1]
            torch.testing.assert_close(cached, full, atol=atol, rtol=1e-4)
            cached[:, pad] = float("-inf")
            prefix = torch.cat([prefix, cached.argmax(-1, keepdim=True)], dim=1)
