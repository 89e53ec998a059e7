"""Whisper's long-form decoding against transformers' generate on tiny random checkpoints, in float32, segment for
segment: each window conditioned on the text before it (condition_on_prev_tokens; greedy and beam 4, multilingual
and `.en`, a prompt as the first segment or before every window, the previous text cut to the decoder's half on a
checkpoint of 40 positions), and windows skipped as silent (no_speech_threshold with logprob_threshold) beside
windows kept, their no-speech probabilities and average log-probabilities transformers' own. Then batch invariance:
an audio's transcript alone and beside other audios.

Random weights loop to the token limit, so both sides get the same small max_new_tokens; temperature 0 alone (the
1-tuple transformers wants beside a logprob_threshold) keeps sampling out.
"""

from dataclasses import replace

import pytest
import torch
from whisper_fixtures import build_whisper, generate_kwargs, ours_and_oracle, speech

from model import BatchDecoder, SpeechOptions, SpeechWindows
from model.audio.features import padded_features

NEW_TOKENS = 12
HALF_OF_40 = 40 // 2 - 1  # previous-text tokens a 40-position decoder reads (transformers' cut_off_length)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("whisper")
    return {"multilingual": build_whisper(root / "tiny"), "en": build_whisper(root / "tiny.en", multilingual=False),
            "40 positions": build_whisper(root / "tiny-40", decoder_positions=40)}


@pytest.fixture(scope="module")
def models(checkpoints):
    return {name: ours_and_oracle(path) for name, path in checkpoints.items()}


def conditioned(**choices) -> SpeechOptions:
    return SpeechOptions(condition_on_previous_text=True, max_new_tokens=NEW_TOKENS, temperature=(0.0,), **choices)


def transformers_segments(oracle, transcriber, samples, options: SpeechOptions) -> list[tuple[float, tuple]]:
    """generate's segments for `samples` with `options`: (start, tokens) each, the start within the audio."""
    kwargs = generate_kwargs(transcriber.bundle, options) | dict(
        return_segments=True, temperature=options.temperatures,
        condition_on_prev_tokens=options.condition_on_previous_text,
        prompt_condition_type=options.prompt_condition_type, logprob_threshold=options.logprob_threshold,
        no_speech_threshold=options.no_speech_threshold)
    with torch.no_grad():
        out = oracle.generate(padded_features(samples)[None], **kwargs)
    duration = len(samples) / 16_000
    return [(round(min(float(s["start"]), duration), 6), tuple(s["tokens"].tolist())) for s in out["segments"][0]]


def our_segments(transcriber, samples, options: SpeechOptions) -> list[tuple[float, tuple]]:
    return [(round(s.start, 6), s.token_ids) for s in transcriber.transcribe(samples, options).segments]


def decodings(bundle, samples, options: SpeechOptions) -> list[tuple]:
    """Each window of one audio decoded alone: (its features, params, hypothesis, the segments it gave)."""
    windows = SpeechWindows(bundle, samples, options)
    decoder = BatchDecoder(bundle.network, capacity=options.num_beams or bundle.generation.num_beams, max_source_len=1,
                           max_new_tokens=bundle.tokenizer.speech.max_target_positions - 1)
    out = []
    while (source := windows.next_source()) is not None:
        params = windows.decode_params()
        decoder.admit([("window", source.features, params)])
        while not (done := [e.results[0] for e in decoder.step() if e.results is not None]):
            pass
        out.append((source.features, params, done[0], windows.take(done[0])))
    return out


CASES = {  # name: (model, seconds, options)
    "greedy": ("multilingual", 62, conditioned(language="en")),
    "prompt as the first segment": ("multilingual", 62, conditioned(language="de", prompt="one two")),
    "prompt before every window": ("multilingual", 62, conditioned(language="de", prompt="one two",
                                                                    prompt_condition_type="all-segments")),
    "beam 4, prompt": ("multilingual", 41, conditioned(language="en", num_beams=4, prompt="hello world")),
    ".en": ("en", 47, conditioned()),
    "cut to the decoder's half": ("40 positions", 95, conditioned(language="en", prompt="the quick brown fox")),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_windows_conditioned_on_the_previous_text_are_transformers_windows(models, case):
    name, seconds, options = CASES[case]
    transcriber, oracle = models[name]
    samples = speech(seconds, seed=seconds)
    ours = our_segments(transcriber, samples, options)
    assert ours == transformers_segments(oracle, transcriber, samples, options)
    assert ours != our_segments(transcriber, samples, replace(options, condition_on_previous_text=False,
                                                              prompt_condition_type="first-segment"))


def test_the_previous_text_is_the_tail_that_fits_half_the_decoder(models):
    """<|startofprev|>, then the prompt and the windows' tokens (a closing pair without its second timestamp), the
    last 19 of them on a 40-position decoder; <|startoftranscript|> after them, where the no-speech probability is
    read."""
    transcriber, _ = models["40 positions"]
    tokens = transcriber.bundle.tokenizer.speech
    options = conditioned(language="en", prompt="the quick brown fox")
    windows = decodings(transcriber.bundle, speech(95, seed=95), options)
    prompts = [params.decoder_prompt for _, params, _, _ in windows]
    said = list(transcriber.bundle.tokenizer.encode(options.prompt))
    assert prompts[0] == (tokens.previous, *said, tokens.start, tokens.languages["en"], tokens.tasks["transcribe"])
    for prompt, (_, _, _, segments) in zip(prompts[1:], windows):
        ends_on_a_pair = [len(s.token_ids) > 2 and s.token_ids[-2] >= tokens.first_timestamp for s in segments]
        said += [t for s, pair in zip(segments, ends_on_a_pair) for t in s.token_ids[:len(s.token_ids) - pair]]
        assert prompt == (tokens.previous, *said[-HALF_OF_40:], *prompts[0][-3:])
    assert max(map(len, prompts)) == 1 + HALF_OF_40 + 3  # the cut happened
    for _, params, _, _ in windows:
        assert params.decoder_prompt[params.no_speech.position] == tokens.start


def test_the_no_speech_probability_is_nospeech_after_the_start_token_before_any_rule(models):
    """transformers' WhisperNoSpeechDetection: the softmax of the model's own logits at <|startoftranscript|>, the
    previous text before it."""
    transcriber, oracle = models["multilingual"]
    windows = decodings(transcriber.bundle, speech(62, seed=62), conditioned(language="en"))
    assert len(windows) > 1 and windows[1][1].no_speech.position > 0
    for features, params, hypothesis, segments in windows:
        with torch.no_grad():
            logits = oracle(input_features=features[None],
                            decoder_input_ids=torch.tensor([params.decoder_prompt])).logits  # (1, T, V)
        expected = logits[0, params.no_speech.position].softmax(-1)[params.no_speech.token]
        assert hypothesis.no_speech_prob == pytest.approx(float(expected), rel=1e-4)
        assert {s.no_speech_prob for s in segments} == {hypothesis.no_speech_prob}


@pytest.fixture(scope="module")
def silence(models):
    """Options under which, on a 95-s audio, the first window is kept and the second skipped: from the measured
    no-speech probabilities and average log-probabilities of the two (the first window reads as the measured one
    whatever the thresholds, so the second one does too)."""
    transcriber, _ = models["multilingual"]
    samples, options = speech(95, seed=95), conditioned(language="en")
    (_, _, first, _), (_, _, second, _) = decodings(transcriber.bundle, samples, options)[:2]
    assert second.score < first.score  # their average log-probabilities (greedy, length penalty 1)
    return samples, replace(options, logprob_threshold=(first.score + second.score) / 2,
                            no_speech_threshold=min(first.no_speech_prob, second.no_speech_prob) / 2)


@pytest.mark.slow
def test_silent_windows_are_skipped_as_transformers_skips_them(models, silence, monkeypatch):
    from transformers.generation.logits_process import WhisperNoSpeechDetection
    from transformers.models.whisper import generation_whisper

    transcriber, oracle = models["multilingual"]
    samples, options = silence
    theirs = []  # each window's (no-speech probability, average log-probability, skipped) as generate decides
    decide = generation_whisper.WhisperGenerationMixin._need_fallback

    def recorded(model, sequence, outputs, index, processors, config, vocab_size, temperature):
        decision = decide(model, sequence, outputs, index, processors, config, vocab_size, temperature)
        no_speech = generation_whisper._get_attr_from_logit_processors(processors, WhisperNoSpeechDetection,
                                                                       "no_speech_prob")[index]
        average = model._retrieve_avg_logprobs(outputs[index]["scores"], sequence, temperature)
        theirs.append((float(no_speech), float(average), decision[1]))
        return decision

    monkeypatch.setattr(generation_whisper.WhisperGenerationMixin, "_need_fallback", recorded)
    expected = transformers_segments(oracle, transcriber, samples, options)
    windows = decodings(transcriber.bundle, samples, options)
    ours = [(h.no_speech_prob, h.score, not segments) for _, _, h, segments in windows]
    assert len(ours) == len(theirs)
    assert [skipped for _, _, skipped in ours] == [skipped for _, _, skipped in theirs]
    assert {skipped for _, _, skipped in ours} == {True, False}
    for (no_speech, average, _), (their_no_speech, their_average, _) in zip(ours, theirs):
        assert (no_speech, average) == pytest.approx((their_no_speech, their_average), rel=1e-4)
    assert our_segments(transcriber, samples, options) == expected


@pytest.mark.slow
def test_an_audio_s_transcript_is_the_same_alone_and_beside_others(models, silence):
    transcriber, _ = models["multilingual"]
    samples, options = silence
    audios = [samples, speech(12, seed=3), speech(41, seed=4)]
    for choices in ({}, {"num_beams": 4}, {"prompt": "one two", "prompt_condition_type": "all-segments"}):
        chosen = replace(options, **choices)
        assert transcriber.transcribe_all(audios, chosen) == [transcriber.transcribe(a, chosen) for a in audios], \
            choices


def test_options_that_cannot_be_followed_are_refused_naming_them(models):
    bundle = models["multilingual"][0].bundle
    for options, words in ((SpeechOptions(prompt_condition_type="every"), "prompt_condition_type 'every'"),
                           (SpeechOptions(prompt_condition_type="all-segments"), "needs condition_on_previous_text")):
        with pytest.raises(ValueError, match=words):
            SpeechWindows(bundle, speech(1), options)
    assert not SpeechOptions.with_fallback().condition_on_previous_text  # the engine reads a prompt a token a step
    assert SpeechOptions.with_fallback().no_speech_threshold == 0.6
