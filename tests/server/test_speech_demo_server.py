"""A server with no model named serves both embedded demos: spoken numbers (espeak-ng's speech) come back as
words through OpenAI's transcriptions route, and as French subtitles through the native /v1/transcribe."""

import shutil
import subprocess

import pytest
from server_process import in_process_client

from server.settings import Settings

pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("espeak-ng") is None, reason=(
    "espeak-ng is not installed (Debian: apt-get install espeak-ng): it makes this test's speech"))]


def spoken(text: str) -> bytes:
    """espeak-ng's WAV of `text`, written to a pipe: its header declares no length (0x7FFFF000 bytes)."""
    return subprocess.run(["espeak-ng", "--stdout", text], check=True, capture_output=True, timeout=60).stdout


@pytest.fixture(scope="module")
def client():
    with in_process_client(Settings(dtype="float32")) as c:
        yield c


def test_the_default_server_serves_the_speech_demo(client):
    cards = {m["id"]: m for m in client.get("/v1/models").json()["data"]}
    assert cards["demo-numbers"]["speech"] is False and cards["demo-spoken-numbers"]["speech"] is True


def test_spoken_numbers_become_words_and_french_subtitles(client):
    heard = client.post("/v1/audio/transcriptions", files={"file": ("n.wav", spoken("forty-two"))},
                        data={"model": "whisper-1", "response_format": "text"})
    assert heard.status_code == 200, heard.text
    assert heard.text.strip() == "forty-two"
    srt = client.post("/v1/transcribe", files={"file": ("n.wav", spoken("seven hundred and twelve"))},
                      data={"target_lang": "fr", "format": "srt"})
    assert srt.status_code == 200, srt.text
    assert srt.text.split("\n")[2] == "sept cent douze"
