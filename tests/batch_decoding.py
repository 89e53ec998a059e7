"""Decoding entries through one running batch, as the engine does, recording what each row saw: the oracle of the
tests that hold a sequence in a busy batch to itself alone (batch invariance, constrained search)."""

from functools import partial

import torch

from model import BatchDecoder, DecodeParams


def decode_joining(network, entries, capacity: int, join_at_most: int = 2, *, max_new_tokens: int,
                   static_shapes: bool = False) -> dict:
    """Decode entries (key, ids, params) through one BatchDecoder, at most `join_at_most` joining per step, as
    rows free up → {key: (results, [log-probabilities of its rows at each step])}."""
    decoder = BatchDecoder(network, capacity=capacity, max_source_len=64, max_new_tokens=max_new_tokens,
                           static_shapes=static_shapes)
    steps, results, pending = {}, {}, list(entries)
    advance = decoder._advance

    def recording(searches, scores, logprobs):
        for key, search in decoder.searches.items():
            steps.setdefault(key, []).append(logprobs[search.rows].clone())
        return advance(searches, scores, logprobs)

    decoder._advance = recording
    while pending or decoder.searches:
        joining = []
        while (pending and len(joining) < join_at_most
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
                join_at_most: int = 2) -> list[int]:
    """The sources whose results or per-step log-probabilities differ between alone and inside a running batch
    of `sequences_at_once` searches (sources joining `join_at_most` per step, lengths mixed, rows leaving as
    they finish)."""
    decode = partial(decode_joining, max_new_tokens=params.max_new_tokens, static_shapes=static_shapes)
    entries = [(i, source, params) for i, source in enumerate(ids)]
    together = decode(network, entries, capacity=sequences_at_once * params.num_beams, join_at_most=join_at_most)
    differ = []
    for entry in entries:
        (alone_results, alone_steps), = decode(network, [entry], params.num_beams, 1).values()
        results, steps = together[entry[0]]
        same_steps = len(steps) == len(alone_steps) and all(map(torch.equal, steps, alone_steps))
        if results != alone_results or not same_steps:
            differ.append(entry[0])
    return differ
