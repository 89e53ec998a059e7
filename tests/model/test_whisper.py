"""Whisper against transformers on tiny random checkpoints (multilingual and `.en`): log-mel features equal to
WhisperFeatureExtractor's, the Hub layout loaded, and WhisperForConditionalGeneration.generate's tokens in float32,
token for token: greedy and beam 4, transcribe and translate, language given and detected, timestamps on and off,
a prompt, short-form and long-form (past 30 s, in windows that seek by timestamps). Then batch invariance: a
window decoded alone and inside a running batch of other windows, bit for bit (its token times too), in float32,
bfloat16 and int8. Word timestamps: test_whisper_words.

Random weights loop to the token limit, so every comparison gives both sides the same small max_new_tokens.
"""

import json
import shutil

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from batch_decoding import differences
from whisper_fixtures import build_whisper, generate_kwargs, ours_and_oracle, speech

from model import DecodeParams, SpeechOptions, SpeechWindows, load
from model.audio.features import padded_features
from model.decoding.logits_rules import ActiveRules, RowRules
from model.decoding.speech_rules import TimestampRules
from model.speech import window_segments

NEW_TOKENS = 12


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("whisper")
    return {"multilingual": build_whisper(root / "tiny"), "en": build_whisper(root / "tiny.en", multilingual=False),
            "5-s window": build_whisper(root / "tiny-5s", encoder_positions=250)}


@pytest.fixture(scope="module")
def models(checkpoints):
    return {name: ours_and_oracle(path) for name, path in checkpoints.items()}


def transformers_tokens(oracle, transcriber, samples, options: SpeechOptions) -> list[int]:
    """What generate returns for `samples` with `options` (its output without </s> padding)."""
    with torch.no_grad():
        features = padded_features(samples, window_frames=2 * oracle.config.max_source_positions)
        out = oracle.generate(features[None], **generate_kwargs(transcriber.bundle, options))[0].tolist()
    return [t for t in out if t != transcriber.bundle.tokenizer.speech.end]


def our_tokens(transcriber, samples, options: SpeechOptions) -> list[int]:
    return [t for segment in transcriber.transcribe(samples, options).segments for t in segment.token_ids]


CASES = {  # name: (model, seconds, options); the slow ones decode many windows or beams through transformers
    "greedy, timestamps": ("multilingual", 8, SpeechOptions()),
    "greedy, German given": ("multilingual", 8, SpeechOptions(language="de")),
    "translate": ("multilingual", 8, SpeechOptions(task="translate", language="fr")),
    "prompt": ("multilingual", 8, SpeechOptions(prompt="hello world", language="en")),
    "beam 4": ("multilingual", 8, SpeechOptions(num_beams=4, language="en")),
    ".en, timestamps": ("en", 5, SpeechOptions()),
    "no timestamps": ("multilingual", 12, SpeechOptions(timestamps=False, language="es")),
    "beam 4, no timestamps": ("en", 6, SpeechOptions(num_beams=4, timestamps=False)),
    "long-form": ("multilingual", 47, SpeechOptions()),
    "long-form, beam 4, prompt": ("multilingual", 41, SpeechOptions(num_beams=4, prompt="one two", language="de")),
    "long-form .en": ("en", 35, SpeechOptions()),
    "a 5-s window": ("5-s window", 4, SpeechOptions(language="fr")),
    "a 5-s window, long-form": ("5-s window", 17, SpeechOptions(language="en")),
}
SLOW = {"no timestamps", "beam 4, no timestamps", "long-form", "long-form, beam 4, prompt", "long-form .en"}


@pytest.mark.parametrize("case", [pytest.param(name, marks=pytest.mark.slow) if name in SLOW else name
                                  for name in CASES])
def test_tokens_equal_transformers_generate(models, case):
    name, seconds, options = CASES[case]
    transcriber, oracle = models[name]
    options = SpeechOptions(**{**options.__dict__, "max_new_tokens": NEW_TOKENS})
    samples = speech(seconds, seed=seconds)
    assert our_tokens(transcriber, samples, options) == transformers_tokens(oracle, transcriber, samples, options)


def test_features_equal_the_feature_extractor():
    from transformers import WhisperFeatureExtractor
    extractor = WhisperFeatureExtractor()
    for seconds, padding in ((7.3, "max_length"), (30, "max_length"), (41, "longest")):
        samples = speech(seconds, seed=1)
        expected = extractor(samples, sampling_rate=16000, return_tensors="pt", padding=padding,
                             truncation=padding == "max_length").input_features[0]
        torch.testing.assert_close(padded_features(samples), expected, rtol=0, atol=1e-6)


def test_the_hub_layout_loads_and_computes_transformers_logits(checkpoints, models, tmp_path):
    transcriber, oracle = models["multilingual"]
    bundle = transcriber.bundle
    assert bundle.family == "whisper" and bundle.languages.source == ("de", "en", "es", "fr", "ja")
    features = padded_features(speech(3))[None]
    prompt = torch.tensor([[bundle.config.decoder_start_token_id, 302, 308, 313, 40, 41]])
    with torch.no_grad():
        expected = oracle(input_features=features, decoder_input_ids=prompt).logits
        ours = bundle.network.forward(features, torch.ones(1, 1500, dtype=torch.bool), prompt)
    torch.testing.assert_close(ours, expected, rtol=1e-4, atol=1e-5)
    # as older repositories: pytorch_model.bin holding proj_out.weight too, no tokenizer.json (vocab.json +
    # merges.txt + added_tokens.json)
    older = tmp_path / "older"
    shutil.copytree(checkpoints["multilingual"], older)
    (older / "tokenizer.json").unlink()
    state = load_file(older / "model.safetensors")
    torch.save(state | {"proj_out.weight": state["model.decoder.embed_tokens.weight"]}, older / "pytorch_model.bin")
    (older / "model.safetensors").unlink()
    again = load(str(older))
    text = "the lazy fox, 42"
    assert again.tokenizer.encode(text) == bundle.tokenizer.encode(text)
    assert again.tokenizer.speech == bundle.tokenizer.speech
    with torch.no_grad():
        assert torch.equal(again.network.forward(features, torch.ones(1, 1500, dtype=torch.bool), prompt), ours)
    assert json.loads((older / "added_tokens.json").read_text())["<|notimestamps|>"] == 312


def test_the_timestamp_rule_bans_what_transformers_bans():
    """Rows of mixed lengths past a 3-token prompt, text and timestamps at random, against
    WhisperTimeStampLogitsProcessor row by row (the suppressing processors are plain bans)."""
    from transformers import GenerationConfig
    from transformers.generation.logits_process import WhisperTimeStampLogitsProcessor

    vocab, eos, no_stamps, prompt = 60, 30, 39, (1, 2, 3)
    processor = WhisperTimeStampLogitsProcessor(
        GenerationConfig(eos_token_id=eos, no_timestamps_token_id=no_stamps, max_initial_timestamp_index=3),
        begin_index=len(prompt))
    params = DecodeParams(max_new_tokens=12, decoder_prompt=prompt, timestamps=TimestampRules(no_stamps, 3))
    generator = torch.Generator().manual_seed(0)
    rows = 64
    histories = [list(prompt) + torch.where(torch.rand(n, generator=generator) < 0.5,
                                            torch.randint(0, eos, (n,), generator=generator),
                                            torch.randint(no_stamps + 1, vocab, (n,), generator=generator)).tolist()
                 for n in torch.randint(0, 7, (rows,), generator=generator).tolist()]
    scores = torch.randn(rows, vocab, generator=generator) * 3
    scores[:, no_stamps + 1:] += torch.randn(rows, 1, generator=generator) * 2 - 3  # timestamps win in some rows
    rules = RowRules(rows, 16, eos, "cpu")
    rules.admit(list(range(rows)), [params] * rows)
    for row, history in enumerate(histories):
        rules.history[row, :len(history)] = torch.tensor(history)
    positions = torch.tensor([len(h) - 1 for h in histories])
    ours = scores.clone()
    rules.apply((ours,), positions, int(positions.max()) + 1, ActiveRules(timestamps=True))
    for row, history in enumerate(histories):
        expected = processor(torch.tensor([history]), scores[row:row + 1].clone())[0]
        assert torch.equal(ours[row], expected), history


def test_window_segments_follow_transformers_rules():
    first = 100  # <|0.00|>
    text = [7, 8, 9]
    # pairs close segments; a single timestamp at the end: the window is done
    segments, advance = window_segments([100, *text, 110, 110, 5, 120], first, 3000)
    assert [(s, e) for s, e, _ in segments] == [(0.0, 0.2), (0.2, 0.4)] and advance == 3000
    # ending on a pair: the text after the last pair is dropped, and the next window starts at its timestamp
    segments, advance = window_segments([100, *text, 110, 110, 5, 6, 130, 130], first, 3000)
    assert segments[-1][2] == [110, 5, 6, 130, 130] and advance == 60
    # no pair: one segment to the last timestamp, or the whole window
    assert window_segments([*text, 125], first, 3000)[0] == [(0.0, 0.5, [*text, 125])]
    assert window_segments(text, first, 1200) == ([(0.0, 12.0, text)], 1200)


def test_windows_are_engine_sources_with_their_prompts(models):
    transcriber, _ = models["multilingual"]
    windows = SpeechWindows(transcriber.bundle, speech(40), SpeechOptions(task="translate", prompt="one"))
    source = windows.next_source()
    assert source.ids == [] and tuple(source.features.shape) == (80, 3000)
    detect = windows.decode_params()  # no language given: detected first, from the first window
    assert detect.max_new_tokens == 1 and set(detect.allowed_tokens) == {302, 303, 304, 305, 306}
    windows.language = "fr"
    params = windows.decode_params()
    assert params.decoder_prompt[0] == 310 and params.decoder_prompt[-3:] == (301, 304, 307)
    assert params.timestamps is not None  # past 30 s, timestamps seek
    with pytest.raises(ValueError, match="English-only"):
        SpeechWindows(models["en"][0].bundle, speech(1), SpeechOptions(language="de"))


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int8"])
def test_a_windows_decoding_does_not_depend_on_its_batch(checkpoints, dtype):
    bundle = load(str(checkpoints["multilingual"]), dtype=dtype)
    windows = [SpeechWindows(bundle, speech(seconds, seed=seconds), SpeechOptions(language="en"))
               for seconds in (3, 9, 17, 29)]
    features = [w.next_source().features for w in windows]
    for beams in (1, 4):
        params = SpeechWindows(bundle, np.zeros(16000, np.float32),  # the results' token times compared too
                               SpeechOptions(language="en", num_beams=beams, max_new_tokens=NEW_TOKENS,
                                             word_timestamps=True)).decode_params()
        assert differences(bundle.network, features, params) == [], beams


def test_segments_end_within_the_audio(models):
    """A short file's window is padded to 30 s, and a random model's timestamps run over the padding: the segments
    still start and end within the audio."""
    transcriber, _ = models["multilingual"]
    transcript = transcriber.transcribe(speech(3.0), SpeechOptions(language="en", max_new_tokens=NEW_TOKENS))
    assert transcript.segments
    assert all(0 <= s.start <= s.end <= transcript.duration == 3.0 for s in transcript.segments), transcript.segments
