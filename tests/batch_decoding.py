"""Decoding entries through one running batch, as the engine does, recording what each row saw: the oracle of the
tests that hold a sequence in a busy batch to itself alone (batch invariance, constrained search)."""

from model import BatchDecoder


def decode_joining(network, entries, capacity: int, join_at_most: int = 2, *, max_new_tokens: int) -> dict:
    """Decode entries (key, ids, params) through one BatchDecoder, at most `join_at_most` joining per step, as
    rows free up → {key: (results, [log-probabilities of its rows at each step])}."""
    decoder = BatchDecoder(network, capacity=capacity, max_source_len=64, max_new_tokens=max_new_tokens)
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
