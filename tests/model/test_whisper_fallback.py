"""Whisper's temperature fallback (SpeechOptions.with_fallback): a window that fails a threshold is decoded again,
sampled at the next temperature, and the last try stands; without a failure it is the plain decoding; the draws come
from the options' seed, so a transcript is the same alone and beside other audios."""

from dataclasses import replace

import pytest
from whisper_fixtures import build_whisper, speech

from model import SpeechOptions, SpeechWindows, Transcriber
from model.speech import compression_ratio

NEW_TOKENS = 12
SECONDS = 40.0  # two windows


@pytest.fixture(scope="module")
def transcriber(tmp_path_factory):
    return Transcriber.from_pretrained(str(build_whisper(tmp_path_factory.mktemp("whisper") / "tiny")))


def fallback(**choices) -> SpeechOptions:
    return SpeechOptions.with_fallback(language="en", max_new_tokens=NEW_TOKENS, **choices)


def test_a_loop_compresses_past_whispers_threshold_and_a_sentence_does_not():
    assert compression_ratio(" and then" * 30) > 2.4
    assert compression_ratio(" The quick brown fox jumps over the lazy dog.") < 2.4
    assert compression_ratio("") == 0.0


@pytest.mark.slow
def test_windows_that_pass_are_the_plain_decoding(transcriber):
    samples = speech(SECONDS)
    plain = transcriber.transcribe(samples, SpeechOptions(language="en", max_new_tokens=NEW_TOKENS,
                                                          condition_on_previous_text=True))
    passing = transcriber.transcribe(samples, fallback(compression_ratio_threshold=None,
                                                       logprob_threshold=float("-inf")))
    assert passing == plain and {s.temperature for s in passing.segments} == {0.0}


@pytest.mark.slow
def test_a_window_that_fails_is_decoded_at_every_temperature_and_the_last_stands(transcriber, monkeypatch):
    tried = []  # each decoding's temperature, as the windows ask for it
    asked = SpeechWindows.decode_params

    def recorded(windows):
        params = asked(windows)
        tried.append(params.temperature if params.do_sample else 0.0)
        return params

    monkeypatch.setattr(SpeechWindows, "decode_params", recorded)
    # no window's average log-probability reaches 0
    transcript = transcriber.transcribe(speech(SECONDS), fallback(logprob_threshold=0.0))
    assert tried == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0] * 2  # two windows, six tries each
    assert {s.temperature for s in transcript.segments} == {1.0}


@pytest.mark.slow
def test_the_draws_come_from_the_seed_alone_or_in_a_batch(transcriber):
    audios = [speech(SECONDS, seed=1), speech(12.0, seed=2)]
    options = fallback(logprob_threshold=-0.5)
    alone = [transcriber.transcribe(samples, options) for samples in audios]
    assert transcriber.transcribe_all(audios, options) == alone
    assert alone[0] == transcriber.transcribe(audios[0], options)
    reseeded = transcriber.transcribe(audios[0], replace(options, seed=7))
    assert [s.token_ids for s in reseeded.segments] != [s.token_ids for s in alone[0].segments]
