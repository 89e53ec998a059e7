"""OpenAI's audio routes and the native /v1/transcribe in process, over a scripted speech model and the demo
translation model: every response_format, streaming, subtitles in another language, and each error in its API's
shape naming the field and the limit."""

import json

import pytest
from fastapi.testclient import TestClient

from audio_files import audio_bytes, declaring_hours, sine, zip_renamed
from speech_double import SPEECH_MODEL, TRANSCRIPT, WithSpeech
from model import SpeechOptions
from server.api import create_app
from server.settings import Settings

SETTINGS = Settings(dtype="float32", max_body_bytes=30_000, max_audio_bytes=200_000, max_audio_seconds=5.0)
WAV = audio_bytes(sine(1.0, 16_000), 16_000)  # 32 kB: over max_body_bytes, within max_audio_bytes


@pytest.fixture(scope="module")
def models():
    provider = WithSpeech(SETTINGS)
    yield provider
    provider.close()


@pytest.fixture(scope="module")
def client(models):
    with TestClient(create_app(models, SETTINGS)) as c:
        yield c


def post(client, path, data=None, file=WAV, name="speech.wav"):
    return client.post(path, data={"model": SPEECH_MODEL, **(data or {})}, files={"file": (name, file)})


def openai_error(response, status, param):
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["param"] == param and error["message"] and error["type"]
    return error


def test_json_and_text(client, models):
    answer = post(client, "/v1/audio/transcriptions", {"language": "en", "prompt": "numbers"})
    assert answer.json() == {"text": TRANSCRIPT.text, "usage": {"type": "duration", "seconds": 4.0}}
    # temperature 0 (the default) is OpenAI's fallback: Whisper's own
    assert models.speech.jobs[-1].options == SpeechOptions.with_fallback(task="transcribe", language="en",
                                                                          prompt="numbers")
    post(client, "/v1/audio/transcriptions", {"temperature": "0.4"})
    assert models.speech.jobs[-1].options == SpeechOptions(temperature=0.4)  # one draw, no thresholds
    assert models.speech.jobs[-1].samples.shape == (16_000,)
    answer = post(client, "/v1/audio/transcriptions", {"response_format": "text"})
    assert answer.headers["content-type"].startswith("text/plain") and answer.text == TRANSCRIPT.text


def test_subtitles(client):
    srt = post(client, "/v1/audio/transcriptions", {"response_format": "srt"}).text
    assert srt == "1\n00:00:00,000 --> 00:00:01,520\nforty-two\n\n2\n00:00:01,520 --> 00:00:03,004\nseven\n\n"
    vtt = post(client, "/v1/audio/transcriptions", {"response_format": "vtt"}).text
    assert vtt == "WEBVTT\n\n00:00:00.000 --> 00:00:01.520\nforty-two\n\n00:00:01.520 --> 00:00:03.004\nseven\n\n"


def test_verbose_json(client):
    answer = post(client, "/v1/audio/transcriptions", {"response_format": "verbose_json",
                                                       "timestamp_granularities[]": "segment"}).json()
    assert (answer["task"], answer["language"], answer["duration"], answer["text"]) == \
        ("transcribe", "english", 4.0, TRANSCRIPT.text)
    first = answer["segments"][0]
    assert {k: first[k] for k in ("id", "seek", "start", "end", "text", "tokens", "temperature", "avg_logprob",
                                  "no_speech_prob")} == \
        {"id": 0, "seek": 0, "start": 0.0, "end": 1.52, "text": " forty-two", "tokens": [1, 2], "temperature": 0.0,
         "avg_logprob": -0.25, "no_speech_prob": 0.125}
    assert first["compression_ratio"] > 0 and "words" not in answer


def test_verbose_json_words(client, models):
    """OpenAI's `words` (without their leading spaces) from the segments' words; the segments only when named."""
    answer = client.post("/v1/audio/transcriptions", data={
        "model": SPEECH_MODEL, "response_format": "verbose_json",
        "timestamp_granularities[]": ["word", "segment"]}, files={"file": ("speech.wav", WAV)}).json()
    assert answer["words"] == [{"word": "forty", "start": 0.0, "end": 0.62},
                               {"word": "-two", "start": 0.62, "end": 1.5}]
    assert len(answer["segments"]) == 2 and models.speech.jobs[-1].options.word_timestamps
    answer = post(client, "/v1/audio/transcriptions", {"response_format": "verbose_json",
                                                       "timestamp_granularities[]": "word"}).json()
    assert len(answer["words"]) == 2 and "segments" not in answer
    post(client, "/v1/audio/transcriptions", {"response_format": "verbose_json"})
    assert not models.speech.jobs[-1].options.word_timestamps


def test_translations_are_the_translate_task_without_a_language(client, models):
    answer = post(client, "/v1/audio/translations", {"language": "fr", "model": "whisper-1"})
    assert answer.json() == {"text": TRANSCRIPT.text}
    assert (models.speech.jobs[-1].options.task, models.speech.jobs[-1].options.language) == ("translate", None)


def test_stream(client):
    with client.stream("POST", "/v1/audio/transcriptions", data={"model": SPEECH_MODEL, "stream": "true"},
                       files={"file": ("a.wav", WAV)}) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]
    assert events == [{"type": "transcript.text.delta", "delta": " forty-two", "logprobs": None},
                      {"type": "transcript.text.delta", "delta": " seven", "logprobs": None},
                      {"type": "transcript.text.done", "text": TRANSCRIPT.text, "logprobs": None}]


@pytest.mark.parametrize("data, file, status, param, words", [
    ({"timestamp_granularities[]": "word"}, WAV, 400, "timestamp_granularities[]", "not 'json'"),
    ({"response_format": "srt", "stream": "true"}, WAV, 400, "stream", "json or text"),
    ({"response_format": "xml"}, WAV, 400, "response_format", "json"),
    ({"temperature": "1.5"}, WAV, 400, "temperature", "1"),
    ({"model": "demo-numbers"}, WAV, 400, "model", "not a speech model; speech models: ['tiny-speech']"),
    ({"model": "nope"}, WAV, 404, "model", "not served"),
    ({}, zip_renamed(), 400, "file", "not audio this server reads"),
    ({}, b"", 400, "file", "empty"),
    ({}, declaring_hours(), 400, "file", "7200.0 s long; at most 5 s"),
    ({}, audio_bytes(sine(6.0, 8_000), 8_000, ".flac"), 400, "file", "6.0 s long; at most 5 s"),
    ({}, b"\0" * 200_001, 413, "file", "200001 bytes; at most 200000"),
], ids=["word", "stream srt", "format", "temperature", "text model", "unknown model", "zip", "empty", "hours",
        "too long", "too large"])
def test_openai_errors(client, data, file, status, param, words):
    error = openai_error(post(client, "/v1/audio/transcriptions", data, file), status, param)
    assert words in error["message"]


def test_body_over_the_audio_limit_is_a_413_before_it_is_read(client):
    error = openai_error(post(client, "/v1/audio/transcriptions", file=b"\0" * 300_000), 413, "body")
    assert "larger than" in error["message"]


def test_a_file_is_required(client):
    answer = client.post("/v1/audio/transcriptions", data={"model": SPEECH_MODEL, "file": "x"})
    assert "multipart file" in openai_error(answer, 400, "file")["message"]


def test_native_transcript_and_subtitles_in_another_language(client):
    answer = post(client, "/v1/transcribe").json()
    assert answer == {"model": SPEECH_MODEL, "language": "en", "duration": 4.0, "text": TRANSCRIPT.text,
                      "segments": [{"start": 0.0, "end": 1.52, "text": "forty-two"},
                                   {"start": 1.52, "end": 3.004, "text": "seven"}]}
    french = post(client, "/v1/transcribe", {"target_lang": "fr", "format": "srt"}, name="talk.mp3")
    assert french.headers["content-disposition"].endswith("talk.fr.srt")
    assert french.text == ("1\n00:00:00,000 --> 00:00:01,520\nquarante-deux\n\n"
                           "2\n00:00:01,520 --> 00:00:03,004\nsept\n\n")
    german = post(client, "/v1/transcribe", {"target_lang": "de", "format": "json"}).json()
    assert (german["text"], german["target_lang"]) == ("zweiundvierzig sieben", "de")
    assert [s["end"] for s in german["segments"]] == [1.52, 3.004]


def test_native_words_are_openais_and_stay_the_spoken_ones_in_another_language(client, models):
    """word_timestamps=true: each json segment holds its words (OpenAI's route gives the same, as one list); the
    words of a segment translated into target_lang are the spoken ones, with their times."""
    openai = post(client, "/v1/audio/transcriptions", {"response_format": "verbose_json",
                                                       "timestamp_granularities[]": "word"}).json()["words"]
    for target in ({}, {"target_lang": "fr"}):
        answer = post(client, "/v1/transcribe", {"word_timestamps": "true", **target}).json()
        assert models.speech.jobs[-1].options.word_timestamps
        words = [w for segment in answer["segments"] for w in segment["words"]]
        assert [{k: w[k] for k in ("word", "start", "end")} for w in words] == openai
        assert all(0 <= w["probability"] <= 1 for w in words)
    assert "words" not in post(client, "/v1/transcribe").json()["segments"][0]
    assert not models.speech.jobs[-1].options.word_timestamps


def test_native_subtitles_in_the_spoken_language_are_the_transcript_untranslated(client, jobs):
    answer = post(client, "/v1/transcribe", {"target_lang": "EN-GB"}).json()
    assert (answer["text"], answer["target_lang"]) == (TRANSCRIPT.text, "EN-GB") and not jobs


@pytest.mark.parametrize("data, file, status, field", [
    ({"format": "docx"}, WAV, 422, "format"),
    ({"task": "summarize"}, WAV, 422, "task"),
    ({"model": "demo-numbers"}, WAV, 422, "model"),
    ({"target_lang": "xx"}, WAV, 422, "target_lang"),
    ({}, zip_renamed(), 400, "file"),
    ({}, declaring_hours(), 422, "file"),
    ({"word_timestamps": "yes"}, WAV, 422, "word_timestamps"),
    ({"word_timestamps": "true", "format": "srt"}, WAV, 422, "word_timestamps"),
], ids=["format", "task", "text model", "target", "zip", "hours", "words: not a flag", "words: not json"])
def test_native_errors(client, data, file, status, field):
    answer = post(client, "/v1/transcribe", data, file)
    assert answer.status_code == status, answer.text
    assert answer.json()["error"]["field"] == field


def test_text_requests_never_reach_a_speech_model(client):
    answer = client.post("/v1/translate", json={"text": "forty-two", "model": SPEECH_MODEL, "target_lang": "fr"})
    assert answer.status_code == 422 and "not a text model" in answer.json()["error"]["message"]
    assert client.post("/v1/translate", json={"text": "forty-two", "target_lang": "fr"}).json()["model"] == \
        "demo-numbers"
    card = {m["id"]: m for m in client.get("/v1/models").json()["data"]}
    assert card[SPEECH_MODEL]["speech"] is True and card["demo-numbers"]["speech"] is False
