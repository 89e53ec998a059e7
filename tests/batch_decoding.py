"""Decoding entries through one running batch, as the engine does, recording what each row saw: the oracle of the
tests that hold a sequence in a busy batch to itself alone (batch invariance, constrained search)."""

import random
from functools import partial

import torch
from marian_fixtures import WORDS_EN

from model import BatchDecoder, DecodeParams
from model.kernels.cpu_kernels import use_onednn_linears
from model.kernels.quantize import quantize_in_blocks

ROW_COUNTS = (2, 3, 4, 5, 8, 16, 63, 64, 65, 128, 256)


def decode_joining(network, entries, capacity: int, join_at_most: int = 2, *, max_new_tokens: int,
                   static_shapes: bool = False, searches_at_most: int | None = None) -> dict:
    """Decode entries (key, ids, params) through one BatchDecoder, at most `join_at_most` joining per step, as
    rows free up (and while fewer than `searches_at_most` search) → {key: (results, [log-probabilities of its
    rows at each step])}."""
    decoder = BatchDecoder(network, capacity=capacity, max_source_len=64, max_new_tokens=max_new_tokens,
                           static_shapes=static_shapes)
    steps, results, pending = {}, {}, list(entries)
    advance = decoder._advance

    def recording(searches, scores, logprobs, *rest):
        for key, search in decoder.searches.items():
            steps.setdefault(key, []).append(logprobs[search.rows].clone())
        return advance(searches, scores, logprobs, *rest)

    decoder._advance = recording
    while pending or decoder.searches:
        joining = []
        while (pending and len(joining) < join_at_most
               and len(decoder.searches) + len(joining) < (searches_at_most or capacity)
               and decoder.free_rows - sum(p.rows for _, _, p in joining) >= pending[0][2].rows):
            joining.append(pending.pop(0))
        if joining:
            decoder.admit(joining)
        for event in decoder.step():
            if event.results is not None:
                results[event.key] = event.results
    return {key: (results[key], steps[key]) for key in results}


def decodings(new_tokens: int) -> dict[str, DecodeParams]:
    """Greedy, beam 4 with n-best and seeded sampling: the decodings a comparison of alone and together runs."""
    return {"greedy": DecodeParams(max_new_tokens=new_tokens),
            "beam 4, n-best": DecodeParams(max_new_tokens=new_tokens, num_beams=4, num_return_sequences=4),
            "sampling": DecodeParams(max_new_tokens=new_tokens, do_sample=True, top_k=20, temperature=1.5, seed=7)}


def differences(network, ids: list[list[int]], params, static_shapes: bool = False, sequences_at_once: int = 3,
                join_at_most: int = 2, capacity: int | None = None) -> list[int]:
    """The sources whose results or per-step log-probabilities differ between alone and inside a running batch
    of `sequences_at_once` searches (sources joining `join_at_most` per step, lengths mixed, rows leaving as
    they finish). Both decode through a decoder of the same `capacity` rows (by default what the batch takes),
    as a server's requests do whatever else it runs: alone is that decoder holding one search at a time."""
    capacity = capacity or sequences_at_once * params.num_beams
    decode = partial(decode_joining, network, [(i, source, params) for i, source in enumerate(ids)], capacity,
                     max_new_tokens=params.max_new_tokens + params.prompt_steps, static_shapes=static_shapes)
    together = decode(join_at_most, searches_at_most=sequences_at_once)
    alone = decode(1, searches_at_most=1)
    return sorted(key for key, (results, steps) in together.items()
                  if results != alone[key][0] or len(steps) != len(alone[key][1])
                  or not all(map(torch.equal, steps, alone[key][1])))


def sources(bundle, count: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    languages = bundle.resolve_languages(None, None, translating=False)
    texts = [" ".join(rng.choice(WORDS_EN) for _ in range(rng.randint(1, 14))) for _ in range(count)]
    return [bundle.source(text, *languages).ids for text in texts]


def assert_rows_invariant(op, rows: torch.Tensor, seed: int = 0) -> None:
    """op over each row alone equals op over that row inside M rows (ROW_COUNTS) at a random position, beside
    rows 100× larger: bit for bit."""
    generator = torch.Generator().manual_seed(seed)
    for m in ROW_COUNTS:
        for r in torch.randint(0, len(rows), (3,), generator=generator).tolist():
            batch = rows[torch.randint(0, len(rows), (m,), generator=generator)] * 100
            at = int(torch.randint(0, m, (1,), generator=generator))
            batch[at] = rows[r]
            assert torch.equal(op(batch)[at], op(rows[r:r + 1])[0]), f"row {r} inside {m} rows at {at}"


def linear(dtype: str, d_in: int, d_out: int) -> torch.nn.Module:
    torch.manual_seed(0)
    layer = torch.nn.Linear(d_in, d_out)
    if dtype == "int8":
        return quantize_in_blocks(layer)
    return use_onednn_linears(torch.nn.Sequential(layer.to(getattr(torch, dtype))))[0]
