"""Whisper's word timestamps on tiny random checkpoints: each window's token times equal to transformers'
generate(return_token_timestamps=True) position for position (the alignment heads read from generation_config.json,
an attention mask giving the audio's frames); the dynamic time warping equal to transformers' and of least cost
against a brute force; tokens grouped into words as openai-whisper groups them; the words of a window alone and
inside a batch of others identical; the words within their segments and the audio.

Exact, not within 0.02 s: DTW picks a path of positions, and our weights (one teacher-forced pass) differ from
transformers' (a prefill, then one step per token) only in the last bits, which no path here turns on.
"""

import itertools
from dataclasses import replace

import numpy as np
import pytest
import torch
from whisper_fixtures import build_whisper, generate_kwargs, ours_and_oracle, speech

from model import BatchDecoder, CheckpointError, SpeechOptions, SpeechWindows
from model.audio.features import padded_features
from model.decoding.token_timing import TokenTimes, dynamic_time_warping, median_filter
from model.loading.families.whisper import alignment_heads
from model.speech_words import segment_words

NEW_TOKENS = 24


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return build_whisper(tmp_path_factory.mktemp("whisper") / "tiny")


@pytest.fixture(scope="module")
def models(checkpoint):
    return ours_and_oracle(checkpoint)


def timed_tokens(bundle, samples, options: SpeechOptions) -> tuple[list[int], list[int | None]]:
    """Each window decoded alone, as Transcriber walks them: the tokens its segments keep and their end
    positions (window-relative, as transformers' token_timestamps), all windows' in order. None for a window that
    starts past the audio's last position (a random model's timestamps seek into the padding): transformers crops
    its attention to a length of 0 or less there, and its times are those of a slice from the end."""
    windows, tokens, ends = SpeechWindows(bundle, samples, options), [], []
    while (source := windows.next_source()) is not None:
        params, inside = windows.decode_params(), windows.audio_frames - windows.seek >= 2
        decoder = BatchDecoder(bundle.network, capacity=params.rows, max_source_len=1,
                               max_new_tokens=params.max_new_tokens + params.prompt_steps)
        decoder.admit([(0, source.encoder_input, params)])
        hypothesis = next(e.results[0] for _ in itertools.count() for e in decoder.step() if e.results)
        kept = sum(len(segment.token_ids) for segment in windows.take(hypothesis))
        tokens += hypothesis.token_ids[:kept]
        ends += list(hypothesis.times.ends[:kept]) if inside else [None] * kept
    return tokens, ends


def transformers_timed_tokens(oracle, bundle, samples, options: SpeechOptions) -> tuple[list[int], list[int]]:
    """generate's tokens and token_timestamps (÷ 0.02 s) with the feature extractor's attention mask, as its
    ASR pipeline passes it."""
    from transformers import WhisperFeatureExtractor
    mask = WhisperFeatureExtractor()(samples, sampling_rate=16000, return_tensors="pt",
                                     return_attention_mask=True).attention_mask
    kwargs = generate_kwargs(bundle, options) | dict(return_token_timestamps=True, attention_mask=mask)
    with torch.no_grad():
        out = oracle.generate(padded_features(samples)[None], **kwargs)
    tokens, seconds = out["sequences"][0].tolist(), out["token_timestamps"][0].tolist()
    while tokens and tokens[-1] == bundle.tokenizer.speech.end:  # the padding
        tokens.pop()
    positions = [round(s / 0.02) for s in seconds[:len(tokens)]]
    assert all(abs(s - p * 0.02) < 1e-5 for s, p in zip(seconds, positions))
    return tokens, positions


CASES = {  # name: (seconds, options); several windows where a window's last pair of timestamps seeks on
    "greedy": (18.8, SpeechOptions(language="en")),
    "beam 3": (15.3, SpeechOptions(language="de", num_beams=3)),
    "prompt": (8.3, SpeechOptions(language="fr", prompt="hello world")),
    "no timestamps": (9.6, SpeechOptions(language="en", timestamps=False)),
    "windows": (27.4, SpeechOptions(language="de")),
    "beam 3, windows": (25.4, SpeechOptions(language="en", num_beams=3)),
}


@pytest.mark.parametrize("case", CASES)
def test_token_times_equal_transformers(models, case):
    transcriber, oracle = models
    seconds, options = CASES[case]
    options = SpeechOptions(**{**options.__dict__, "max_new_tokens": NEW_TOKENS, "word_timestamps": True})
    samples = speech(seconds, seed=int(seconds))
    tokens, ends = timed_tokens(transcriber.bundle, samples, options)
    assert len(tokens) > 10 and len(set(ends) - {None}) > 2
    expected_tokens, expected_ends = transformers_timed_tokens(oracle, transcriber.bundle, samples, options)
    assert tokens == expected_tokens
    assert ends == [None if ours is None else theirs for ours, theirs in zip(ends, expected_ends)]


def test_dynamic_time_warping_is_transformers_and_of_least_cost():
    from transformers.models.whisper.generation_whisper import _dynamic_time_warping
    rng = np.random.default_rng(0)
    for case in range(200):
        rows, cols = rng.integers(1, 6), rng.integers(1, 7)
        # Small integers tie often, and the tie-breaks must be transformers' too. Theirs can take the costlier
        # step on a tie (the left one when the other two tie below it), so the least total is asserted without.
        ties = case % 2 == 1
        cost = (rng.integers(-3, 3, (rows, cols)) if ties else rng.standard_normal((rows, cols))).astype(np.float32)
        path = dynamic_time_warping(cost)
        assert all(map(np.array_equal, path, _dynamic_time_warping(cost.astype(np.float64)))), cost
        steps = {(int(di), int(dj)) for di, dj in zip(np.diff(path[0]), np.diff(path[1]))}
        assert (path[0][0], path[1][0], path[0][-1], path[1][-1]) == (0, 0, rows - 1, cols - 1)
        assert steps <= {(1, 0), (0, 1), (1, 1)}, path
        if not ties:
            assert cost[path].astype(np.float64).sum() == pytest.approx(least_cost(cost), abs=1e-4), cost


def least_cost(cost: np.ndarray) -> float:
    """The least total over every path from (0, 0) to the last cell by steps down, right or both, each one
    enumerated."""
    rows, cols = cost.shape

    def totals(i, j):
        if (i, j) == (rows - 1, cols - 1):
            yield float(cost[i, j])
        for di, dj in ((1, 0), (0, 1), (1, 1)):
            if i + di < rows and j + dj < cols:
                yield from (float(cost[i, j]) + rest for rest in totals(i + di, j + dj))
    return min(totals(0, 0))


def test_median_filter_is_transformers():
    from transformers.models.whisper.generation_whisper import _median_filter
    x = torch.randn(1, 3, 5, 40, generator=torch.Generator().manual_seed(0))
    for width, length in ((7, 40), (7, 4), (3, 2)):
        assert torch.equal(median_filter(x[..., :length], width), _median_filter(x[..., :length], width))


def test_tokens_group_into_words_as_openai_whisper_groups_them():
    """Pieces of whole characters; a word at a space or a punctuation mark; then opening marks joined to the word
    after them and closing ones to the word before, whose times stand. Indices are the window's tokens'."""
    spelled = [b" Hel", b"lo", b",", b" (", b" wor", b"ld", b"!", b")", b" caf", b"\xc3", b"\xa9", b" ok"]
    indices = [1, 2, 3, 5, 6, 7, 8, 9, 10, 11, 12, 13]  # 0 and 4: timestamps
    times = TokenTimes(ends=tuple(range(0, 140, 10)), probabilities=tuple(k / 20 for k in range(14)))
    words = segment_words(spelled, indices, times, lambda position: position / 100, spaceless=False)
    assert [(w.word, w.start, w.end) for w in words] == [
        (" Hello,", 0.0, 0.2), (" ( world!)", 0.5, 0.7), (" café", 0.9, 1.2), (" ok", 1.2, 1.3)]
    assert [w.probability for w in words] == pytest.approx([0.075, 0.325, 0.55, 0.65])
    # written without spaces: a word per character, bytes that are none a word of their own
    spaceless = segment_words([b"\xe4\xbd", b"\xa0", b"\xe5\xa5\xbd", b"\xff", b"\xe3\x80\x82"], [0, 1, 2, 3, 4],
                              times, lambda position: position / 100, spaceless=True)
    assert [w.word for w in spaceless] == ["你", "好", "\ufffd。"]


def test_alignment_heads_are_read_else_the_decoder_s_last_half(tmp_path):
    config = {"decoder_layers": 4, "decoder_attention_heads": 3}
    assert alignment_heads([[3, 1], [2, 0]], config, tmp_path) == ((3, 1), (2, 0))
    assert alignment_heads(None, config, tmp_path) == ((2, 0), (2, 1), (2, 2), (3, 0), (3, 1), (3, 2))
    with pytest.raises(CheckpointError, match="alignment_heads .*4 layers of 3 heads"):
        alignment_heads([[4, 0]], config, tmp_path)


def test_words_lie_within_their_segments_and_change_nothing_else(models):
    """Words in order, each within its segment (the audio's first 27.4 s, windows seeking on), spelling its text;
    the transcript otherwise the one without words."""
    transcriber, _ = models
    options = SpeechOptions(language="en", max_new_tokens=NEW_TOKENS, word_timestamps=True)
    samples = speech(27.4, seed=27)
    transcript = transcriber.transcribe(samples, options)
    words = [w for segment in transcript.segments for w in segment.words]
    assert len(words) > 5 and len({w.start for w in words}) > 2
    assert [w.start for w in words] == sorted(w.start for w in words)
    assert all(0 <= w.probability <= 1 for w in words)
    for segment in transcript.segments:
        assert "".join(w.word for w in segment.words) == segment.text
        assert all(segment.start <= w.start <= w.end <= segment.end for w in segment.words), segment
    without = transcriber.transcribe(samples, replace(options, word_timestamps=False))
    assert replace(transcript, segments=tuple(replace(s, words=()) for s in transcript.segments)) == without


def test_a_window_s_words_do_not_depend_on_its_batch(models):
    """Audios transcribed together, their windows in one batch, and each alone: the same words, bit for bit."""
    transcriber, _ = models
    options = SpeechOptions(language="en", max_new_tokens=NEW_TOKENS, word_timestamps=True)
    audios = [speech(seconds, seed=seconds) for seconds in (4, 9, 17, 26)]
    together = transcriber.transcribe_all(audios, options, batch_size=4)
    assert together == [transcriber.transcribe(audio, options) for audio in audios]
    assert all(segment.words for transcript in together for segment in transcript.segments if segment.text)
