"""Spreading a test's settings over checkpoints instead of crossing them with every one."""


def on_two_of(names: list[str], cases: list[tuple]) -> list[tuple]:
    """Each case with two of `names` in turn, every name on as many cases: for settings that exercise the search,
    on checkpoints whose logits other tests hold to transformers' on their own."""
    return [(names[(i + k) % len(names)], *case) for i, case in enumerate(cases) for k in (0, 1)]
