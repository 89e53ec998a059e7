"""Audio as a native document job (in process: a tiny random Whisper checkpoint beside the demo translation model,
named by its folder): uploaded, polled and downloaded as subtitles that parse as SubRip or WebVTT, their cues timed as
/v1/transcribe times the same file's segments and each the translation /v1/translate gives of its segment; hostile
audio refused at upload naming the field and the limit, a job over its quota ended as an error saying so; real
speech made by espeak-ng decoded to 16 kHz mono and made subtitles."""

import re
import shutil
import subprocess
from dataclasses import replace

import pytest
import soundfile
from audio_files import audio_bytes, declaring_hours, sine, truncated, zip_renamed
from server_process import eventually, in_process_client
from whisper_fixtures import build_whisper, speech

from model import demo_model_dir, read_audio
from server.settings import Settings

SPEECH_MODEL, TRANSLATION_MODEL = "tiny-whisper", "checkpoint"  # their folders' names
# A random model's windows run to their limit: max_new_tokens keeps them short (as in test_openai_audio_client).
SETTINGS = Settings(dtype="float32", engine_process=False, max_new_tokens=40, max_body_bytes=100_000,
                    max_audio_bytes=400_000, max_audio_seconds=20.0, job_chunk_chars=40)
WAV = audio_bytes(speech(8.0), 16_000)  # 256 kB: over max_body_bytes, which bounds documents, not audio
TIMING = {"srt": r"\d\d:\d\d:\d\d,\d{3}", "vtt": r"\d\d:\d\d:\d\d\.\d{3}"}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return build_whisper(tmp_path_factory.mktemp("speech") / SPEECH_MODEL)


def serving(settings: Settings, checkpoint):
    return in_process_client(settings, [str(checkpoint), str(demo_model_dir())])


@pytest.fixture(scope="module")
def client(checkpoint):
    with serving(SETTINGS, checkpoint) as c:
        yield c


def submit(client, name: str, data: bytes, **form):
    return client.post("/v1/documents", files={"file": (name, data)}, data={"target_lang": "de", **form})


def done(client, name: str, data: bytes, **form):
    """The finished job's status, and its result fetched."""
    submitted = submit(client, name, data, **form)
    assert submitted.status_code == 202, submitted.text
    path = f"/v1/documents/{submitted.json()['document_id']}"
    keyed = {"X-Document-Key": submitted.json()["document_key"]}
    status = eventually(lambda: (s := client.get(path, headers=keyed).json())["status"] in ("done", "error") and s,
                        120)
    return status, client.get(path + "/result", headers=keyed)


def transcribed(client, data: bytes, **form):
    answer = client.post("/v1/transcribe", files={"file": ("talk.wav", data)}, data={"language": "en", **form})
    assert answer.status_code == 200, answer.text
    return answer


def cues(text: str, kind: str) -> list[tuple[str, str, str]]:
    """(start, end, text) of each cue of a SubRip (`kind` srt) or WebVTT (vtt) file, which must parse as one:
    numbered cues (SubRip) or the WEBVTT header (WebVTT), each cue a timing line, then its text, then a blank line."""
    if kind == "vtt":
        header, _, text = text.partition("\n\n")
        assert header == "WEBVTT"
    assert not text or text.endswith("\n\n")
    out = []
    for number, block in enumerate(text.split("\n\n")[:-1], 1):
        lines = block.split("\n")
        if kind == "srt":
            assert lines.pop(0) == str(number)
        start, end = lines[0].split(" --> ")
        assert re.fullmatch(TIMING[kind], start) and re.fullmatch(TIMING[kind], end), lines[0]
        assert len(lines) > 1 and all(lines[1:]), block  # a text, and no blank line in it (which would end the cue)
        out.append((start, end, "\n".join(lines[1:])))
    return out


@pytest.mark.slow
def test_subtitles_keep_the_transcript_s_timings_and_translate_each_segment(client):
    status, result = done(client, "talk.wav", WAV, source_lang="en")
    assert status["status"] == "done", status
    assert "talk.translated.srt" in result.headers["content-disposition"]
    subtitles = cues(result.text, "srt")
    spoken = transcribed(client, WAV, format="json").json()["segments"]
    timings = [(start, end) for start, end, _ in cues(transcribed(client, WAV, format="srt").text, "srt")]
    assert len(subtitles) >= 2 and [(start, end) for start, end, _ in subtitles] == timings
    said = [s["text"] for s in spoken if s["text"].strip()]  # a segment without text makes no cue
    translated = client.post("/v1/translate", json={"text": said, "target_lang": "de",
                                                    "model": TRANSLATION_MODEL}).json()["translations"]
    assert [text for _, _, text in subtitles] == [t["text"] for t in translated]
    # charged (and measured) by the characters of its cues, counted once transcribed
    assert (status["characters"], status["progress"]) == (sum(len(s["text"]) for s in spoken), 1.0)


@pytest.mark.slow
def test_vtt_when_output_format_asks_is_what_transcribe_answers(client):
    audio = audio_bytes(speech(5.0, seed=3), 16_000, ".flac")
    status, result = done(client, "talk.flac", audio, source_lang="en", target_lang="fr", output_format=".VTT")
    assert status["status"] == "done" and "talk.translated.vtt" in result.headers["content-disposition"]
    assert cues(result.text, "vtt")
    assert result.text == transcribed(client, audio, format="vtt", target_lang="fr",
                                      translation_model=TRANSLATION_MODEL).text


@pytest.mark.parametrize("name, data, form, status, field, words", [
    ("talk.wav", truncated(), {}, 400, "file", "truncated: the header declares 32000 frames"),
    ("talk.wav", zip_renamed(), {}, 400, "file", "not audio this server reads"),
    ("talk.wav", b"", {}, 400, "file", "empty"),
    ("talk.wav", declaring_hours(), {}, 422, "file", "7200.0 s long; at most 20 s"),
    ("talk.flac", audio_bytes(sine(21.0, 8_000), 8_000, ".flac"), {}, 422, "file", "21.0 s long; at most 20 s"),
    ("talk.mp3", b"\0" * 400_001, {}, 413, "file", "400001 bytes; at most 400000"),
    ("talk.ogg", b"\0" * 500_000, {}, 413, "body", "larger than"),
    ("talk.wav", WAV, {"output_format": "docx"}, 422, "output_format", "written as .srt or .vtt"),
    ("talk.wav", WAV, {"model": SPEECH_MODEL}, 422, "model", "not a text model"),
    ("talk.aac", WAV, {}, 400, "file", ".wav, .flac"),
    ("notes.txt", b"seven. " * 20_000, {}, 413, "file", "140000 bytes; at most 100000"),
], ids=["truncated", "zip", "empty", "hours", "too long", "too many bytes", "body", "output_format", "speech model",
        "suffix", "document bytes"])
def test_bad_files_are_refused_at_upload_naming_the_field_and_the_limit(client, name, data, form, status, field,
                                                                        words):
    answer = submit(client, name, data, source_lang="en", **form)
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert error["field"] == field and words in error["message"]


@pytest.mark.slow
def test_a_job_over_its_quota_ends_as_an_error_saying_so_and_the_server_goes_on(checkpoint):
    """Nothing is known to charge at upload; the transcript's cues are charged when their translation starts."""
    with serving(replace(SETTINGS, character_quota=5), checkpoint) as poor:
        status, result = done(poor, "talk.wav", WAV, source_lang="en")
        assert status["status"] == "error" and "character quota exceeded: 0 of 5 used" in status["error_message"]
        assert result.status_code == 404 and "quota" in result.json()["error"]["message"]
        assert poor.post("/v1/translate", json={"text": "seven", "target_lang": "de"}).status_code == 200


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed (Debian: apt-get install "
                    "espeak-ng): it makes this test's speech")
@pytest.mark.slow
def test_real_speech_from_espeak_ng(client, tmp_path):
    """Debian's espeak-ng speaks a sentence into a 22,050 Hz WAV: decoded to 16 kHz mono of the same duration, and
    a document job of it completes."""
    path = tmp_path / "spoken.wav"
    subprocess.run(["espeak-ng", "-w", str(path), "Forty-two people walked seven hundred miles."], check=True,
                   timeout=60)
    header = soundfile.info(str(path))
    assert header.samplerate == 22_050
    samples = read_audio(path.read_bytes(), SETTINGS.max_audio_bytes, SETTINGS.max_audio_seconds)
    assert samples.dtype == "float32" and samples.ndim == 1
    assert abs(len(samples) - header.frames * 16_000 / 22_050) <= 1 and len(samples) > 16_000
    assert samples.std() > 0.01  # speech, not silence
    status, result = done(client, "spoken.wav", path.read_bytes(), source_lang="en")
    assert status["status"] == "done", status
    assert cues(result.text, "srt")  # random weights: what the cues say is noise, their form is not
