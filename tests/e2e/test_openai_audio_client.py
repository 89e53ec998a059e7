"""OpenAI's audio API through a real server (python -m server --no-ray, a tiny random Whisper checkpoint beside the
demo translation model): the official `openai` client unchanged, `audio.transcriptions.create` in every
response_format (verbose_json with words too) and streamed, `audio.translations.create`, and the native
/v1/transcribe's subtitles. Random weights give random text: the oracle is model.Transcriber in this process on the
same file's samples."""

import httpx
import openai
import pytest
from server_process import running_server
from whisper_fixtures import build_whisper, speech

from audio_files import audio_bytes
from model import SpeechOptions, Transcriber, demo_model_dir, read_audio
from server.front.subtitles import srt, vtt

SECONDS = 8.0  # several windows all the same: each starts where the last one's last timestamp fell
# A random model's windows run to their limit: kept short. The server's max_new_tokens, less a window's decoder
# prompt, bounds them; the oracle is given the same bound.
WINDOW_TOKENS = 32
MAX_NEW_TOKENS = WINDOW_TOKENS + 8


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return build_whisper(tmp_path_factory.mktemp("speech") / "tiny-whisper")


@pytest.fixture(scope="module")
def url(checkpoint):
    with running_server("--no-ray", "--model", str(checkpoint), "--model", str(demo_model_dir()),
                        "--max-new-tokens", str(MAX_NEW_TOKENS), timeout=300) as server:
        yield server.url


@pytest.fixture(scope="module")
def client(url):
    return openai.OpenAI(api_key="any", base_url=url + "/v1", max_retries=0)


@pytest.fixture(scope="module")
def audio(tmp_path_factory):
    path = tmp_path_factory.mktemp("audio") / "speech.flac"
    path.write_bytes(audio_bytes(speech(SECONDS), 16_000, ".flac"))
    return path


@pytest.fixture(scope="module")
def oracle(checkpoint, audio):
    """What the server must answer, per task: model.Transcriber on the samples the server decodes, with Whisper's
    fallback (the server's at temperature 0)."""
    transcriber = Transcriber.from_pretrained(str(checkpoint))
    samples = read_audio(audio.read_bytes(), max_bytes=10**8, max_seconds=600)
    return {task: transcriber.transcribe(samples, SpeechOptions.with_fallback(task=task, language=language,
                                                                              max_new_tokens=WINDOW_TOKENS))
            for task, language in (("transcribe", "en"), ("translate", None))}


def transcribe(client, audio, **options):
    with open(audio, "rb") as file:
        return client.audio.transcriptions.create(model="tiny-whisper", file=file, language="en", **options)


def test_json_and_text(client, audio, oracle):
    answer = transcribe(client, audio)
    assert answer.text == oracle["transcribe"].text
    assert (answer.usage.type, answer.usage.seconds) == ("duration", SECONDS)
    assert transcribe(client, audio, response_format="text") == oracle["transcribe"].text


def test_subtitles(client, audio, oracle):
    segments = oracle["transcribe"].segments
    assert len(segments) >= 2
    assert transcribe(client, audio, response_format="srt") == srt(segments)
    assert transcribe(client, audio, response_format="vtt") == vtt(segments)


def test_verbose_json(client, audio, oracle):
    answer = transcribe(client, audio, response_format="verbose_json", timestamp_granularities=["segment"])
    assert (answer.language, answer.duration, answer.text) == ("english", SECONDS, oracle["transcribe"].text)
    assert [(s.id, s.start, s.end, s.text, tuple(s.tokens)) for s in answer.segments] == \
        [(i, s.start, s.end, s.text, s.token_ids) for i, s in enumerate(oracle["transcribe"].segments)]


def test_stream(client, audio, oracle):
    with open(audio, "rb") as file:
        events = list(client.audio.transcriptions.create(model="tiny-whisper", file=file, language="en",
                                                         stream=True))
    assert [e.type for e in events] == ["transcript.text.delta"] * len(oracle["transcribe"].segments) + \
        ["transcript.text.done"]
    assert "".join(e.delta for e in events[:-1]) == events[-1].text == oracle["transcribe"].text


@pytest.mark.filterwarnings("ignore:deprecated:DeprecationWarning")  # the client marks the call; OpenAI still serves it
def test_translations_with_openai_s_model_name(client, audio, oracle):
    with open(audio, "rb") as file:
        answer = client.audio.translations.create(model="whisper-1", file=file)
    assert answer.text == oracle["translate"].text  # the language detected, as the oracle's


def test_verbose_json_words(client, audio, checkpoint):
    """Words at the top level (OpenAI's TranscriptionVerbose.words) in order, each within a segment, as
    model.Transcriber times them in this process; word timestamps need verbose_json."""
    answer = transcribe(client, audio, response_format="verbose_json", timestamp_granularities=["word", "segment"])
    assert answer.words and answer.segments
    assert [w.start for w in answer.words] == sorted(w.start for w in answer.words)
    assert all(any(s.start <= w.start <= w.end <= s.end for s in answer.segments) for w in answer.words)
    samples = read_audio(audio.read_bytes(), max_bytes=10**8, max_seconds=600)
    expected = Transcriber.from_pretrained(str(checkpoint)).transcribe(samples, SpeechOptions.with_fallback(
        language="en", max_new_tokens=WINDOW_TOKENS, word_timestamps=True))
    assert [(w.word, w.start, w.end) for w in answer.words] == \
        [(w.word.strip(), w.start, w.end) for s in expected.segments for w in s.words]
    assert answer.text == expected.text  # words change nothing else
    with pytest.raises(openai.BadRequestError, match="timestamp_granularities.*need response_format 'verbose_json'"):
        transcribe(client, audio, timestamp_granularities=["word"])


def test_hostile_audio_is_a_400_and_the_server_goes_on(client, audio, oracle):
    with pytest.raises(openai.BadRequestError, match="not audio this server reads"):
        client.audio.transcriptions.create(model="tiny-whisper", file=("speech.wav", b"PK\x03\x04" + b"\0" * 100))
    assert transcribe(client, audio).text == oracle["transcribe"].text


def test_native_subtitles(url, audio, oracle):
    answer = httpx.post(url + "/v1/transcribe", data={"model": "tiny-whisper", "language": "en", "format": "vtt"},
                        files={"file": ("speech.flac", audio.read_bytes())}, timeout=120)
    assert answer.status_code == 200, answer.text
    assert answer.text == vtt(oracle["transcribe"].segments)


def test_the_page_s_speech_view_shows_the_subtitles(url, audio):
    """The web page's Speech view (a real headless Chromium): the file uploaded, the subtitles shown as the API
    answers them for the same file (the language detected), a link to save them."""
    from loadtests.browser import chrome, missing
    from selenium.webdriver.support.ui import WebDriverWait

    if missing():
        pytest.skip(f"no headless browser: {missing()}")
    browser = chrome(audio.parent)
    try:
        browser.get(url + "/?view=speech&speech_format=srt")
        tab = browser.find_element("id", "tab-speech")
        WebDriverWait(browser, 10).until(lambda _: tab.is_displayed())
        browser.find_element("id", "audio").send_keys(str(audio))
        browser.find_element("id", "transcribe").click()
        transcript = browser.find_element("id", "transcript")
        WebDriverWait(browser, 120).until(lambda _: transcript.get_property("value"))
        expected = httpx.post(url + "/v1/transcribe", data={"format": "srt"},
                              files={"file": (audio.name, audio.read_bytes())}, timeout=120)
        assert transcript.get_property("value") == expected.text
        assert browser.find_element("id", "subtitles-download").is_displayed()
    finally:
        browser.quit()


def test_native_subtitles_in_another_language_keep_the_timings(url, audio, oracle):
    """Each cue's text translated by the served translation model (the demo model, named by its folder), as
    /v1/translate translates it; the cues' timings the transcript's."""
    answer = httpx.post(url + "/v1/transcribe", data={"language": "en", "format": "srt", "target_lang": "fr",
                                                      "translation_model": "checkpoint"},
                        files={"file": ("speech.flac", audio.read_bytes())}, timeout=120)
    assert answer.status_code == 200, answer.text
    cues = [cue.split("\n", 2) for cue in answer.text.strip("\n").split("\n\n")]
    spoken = oracle["transcribe"].segments
    assert [timing for _, timing, _ in cues] == [timing for _, timing, _ in
                                                 (cue.split("\n", 2) for cue in srt(spoken).strip("\n").split("\n\n"))]
    said = [s.text.strip() for s in spoken if s.text.strip()]  # a segment without text makes no cue
    translated = httpx.post(url + "/v1/translate", json={"text": said, "target_lang": "fr", "model": "checkpoint"},
                            timeout=120).json()
    assert [text for _, _, text in cues] == [t["text"] for t in translated["translations"]]


def test_concurrent_files_share_the_batch_and_answer_alike(client, audio, oracle, tmp_path):
    """Four transcriptions at once, two of them of a shorter file: their windows decode in one batch, and each
    answer is the one it gets alone."""
    from concurrent.futures import ThreadPoolExecutor

    short = tmp_path / "short.wav"
    short.write_bytes(audio_bytes(speech(3.0, seed=1), 16_000, ".wav"))
    alone = transcribe(client, short).text
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda path: transcribe(client, path).text, [audio, short, audio, short]))
    assert answers == [oracle["transcribe"].text, alone] * 2
