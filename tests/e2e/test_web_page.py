"""The web page at / in a real headless Chromium (Debian's chromium and chromium-driver, driven by selenium)
against a real `python -m server --no-ray`: what the page shows equals what the API answers for the same input.
After every test the browser's console holds no error but the statuses the test provoked, and every resource
the page loaded came from the server. One browser for the module (its microphone Chromium's fake one, a beep),
one server of the demo model, and one with a tiny random Whisper beside it for the speech view."""

from __future__ import annotations

import base64
import re
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from audio_files import audio_bytes
from loadtests.browser import chrome, missing
from model import demo_model_dir
from server_process import Scrape, eventually, running_server
from whisper_fixtures import build_whisper, speech

MAX_REQUEST_CHARS = 200  # small, so an over-long text is quick to type
LONG_GENERATION = 500  # new tokens: long enough (about 2 s on 2 cores) to stop halfway
MODELS = ("demo-numbers", "demo-numbers-b")
RATE_LIMIT = 3  # requests a minute for the key of the keyed server
# CSS pixels wide: a phone held upright; a 1280-pixel window at 200 % zoom (zoom divides the CSS width)
NARROW_WIDTHS = (360, 640)
FAKE_MICROPHONE = ("--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream")
WHISPER_TOKENS = 40  # a random Whisper's window runs to this bound: kept short
SPEECH_SECONDS = 8.0  # a file of several windows, each streamed as its own delta
RECORD_SECONDS = 1.5
MAX_AUDIO_BYTES = 2 ** 20  # the speech server's: a 40-s WAV is over it


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """Two names for the demo model, so the page has a model to choose for a pair."""
    models = tmp_path_factory.mktemp("models")
    for name in MODELS:
        (models / name).symlink_to(demo_model_dir(), target_is_directory=True)
    with running_server("--no-ray", "--model", str(models), "--max-request-chars", str(MAX_REQUEST_CHARS),
                        "--max-new-tokens", str(LONG_GENERATION)) as s:
        yield s


@pytest.fixture(scope="module")
def downloads(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("downloads")


@pytest.fixture(scope="module")
def speech_server(tmp_path_factory):
    """A tiny random Whisper (random text, quick to decode: its windows bounded by max_new_tokens) and the demo
    model, which the page's other views need."""
    checkpoint = build_whisper(tmp_path_factory.mktemp("speech") / "tiny-whisper")
    with running_server("--no-ray", "--model", str(checkpoint), "--model", str(demo_model_dir()),
                        "--max-new-tokens", str(WHISPER_TOKENS), "--max-audio-seconds", "300",
                        "--max-audio-bytes", str(MAX_AUDIO_BYTES), timeout=300) as s:
        yield s


@pytest.fixture(scope="module")
def browser(downloads):
    """Chromium with its fake microphone, allowed without asking (loadtests.browser.chrome takes no more switches:
    its ChromeOptions is given them while it starts this one)."""
    if missing():
        pytest.skip(f"no headless browser: {missing()}")
    from selenium import webdriver

    class WithFakeMicrophone(webdriver.ChromeOptions):
        def __init__(self):
            super().__init__()
            for switch in FAKE_MICROPHONE:
                self.add_argument(switch)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(webdriver, "ChromeOptions", WithFakeMicrophone)
        driver = chrome(downloads)
    yield driver
    driver.quit()


@pytest.fixture(autouse=True)
def clean_console(request):
    """Yields the set of HTTP statuses the test expects (Chromium logs each as a console error); afterwards no
    other console error, and no resource from anywhere but the page's server."""
    if "browser" not in request.fixturenames:
        yield set()
        return
    browser = request.getfixturevalue("browser")
    browser.get_log("browser")  # what earlier tests left
    expected: set[int] = set()
    yield expected
    errors = [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"
              and not any(f"status of {status} " in e["message"] for status in expected)]
    assert not errors
    origin = "{0.scheme}://{0.netloc}/".format(urlsplit(browser.current_url))
    resources = browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert resources and all(name.startswith(origin) for name in resources), resources


def wait(browser, condition, timeout: float = 10.0):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(browser, timeout, poll_frequency=0.05).until(lambda _: condition())


def by_id(browser, id_: str):
    return browser.find_element("id", id_)


def translate(server, **body) -> dict:
    response = httpx.post(server.url + "/v1/translate", json=body, timeout=30)
    return response.json()


def test_the_page_has_a_title_an_icon_and_labelled_controls(server, browser):
    browser.get(server.url + "/")
    wait(browser, lambda: by_id(browser, "target").get_attribute("value"))
    assert browser.title.startswith("seq2seq-serve")
    assert browser.execute_script("return document.querySelector('link[rel=icon]').href").endswith("favicon.svg")
    unlabelled = browser.execute_script(
        "return [...document.querySelectorAll('input, select, textarea, output')]"
        ".filter(c => !c.labels?.length && !c.getAttribute('aria-label')).map(c => c.id || c.name)")
    assert unlabelled == []


def test_a_link_with_the_state_translates_and_shows_the_detected_language(server, browser):
    browser.get(server.url + "/?target=fr&q=forty-two")
    expected = translate(server, text="forty-two", source_lang="auto", target_lang="fr")["translations"][0]
    wait(browser, lambda: by_id(browser, "translation").get_attribute("value"))
    assert by_id(browser, "translation").get_attribute("value") == expected["text"] == "quarante-deux"
    detected = expected["detected_language"]
    assert by_id(browser, "detected").text == f"Detected: English ({round(detected['confidence'] * 100)} %)"
    assert by_id(browser, "counter").text == f"9 / {MAX_REQUEST_CHARS} characters"


def test_typing_translates_and_the_url_keeps_the_state(server, browser):
    from selenium.webdriver.support.ui import Select

    browser.get(server.url + "/")
    wait(browser, lambda: by_id(browser, "target").get_attribute("value"))
    Select(by_id(browser, "target")).select_by_value("es")
    by_id(browser, "text").send_keys("seven hundred and three")
    expected = translate(server, text="seven hundred and three", source_lang="auto", target_lang="es")
    wait(browser, lambda: by_id(browser, "translation").get_attribute("value"))
    assert by_id(browser, "translation").get_attribute("value") == expected["translations"][0]["text"]
    assert "target=es" in browser.current_url and "q=seven+hundred+and+three" in browser.current_url


def test_glossary_terms_go_with_the_request_and_stay_in_the_url(server, browser, clean_console):
    """The page sends the terms as /v1/translate's glossary (what the translation does with them is the engine's:
    the page shows what the API answers for the same request, its error for a term it refuses), and a link with
    them restores them."""
    browser.get(server.url + "/?source=en&target=fr&q=forty-two")
    wait(browser, lambda: by_id(browser, "translation").get_attribute("value"))
    assert not by_id(browser, "glossary-box").get_attribute("open")
    by_id(browser, "glossary-box").click()
    by_id(browser, "glossary").send_keys("forty-two = quarante-trois\nseven = huit")
    expected = translate(server, text="forty-two", source_lang="en", target_lang="fr",
                         glossary={"forty-two": "quarante-trois", "seven": "huit"})["translations"][0]["text"]
    wait(browser, lambda: "glossary=" in browser.current_url)
    assert "glossary=forty-two+%3D+quarante-trois%0Aseven+%3D+huit" in browser.current_url
    wait(browser, lambda: by_id(browser, "translation").get_attribute("value") == expected)
    browser.get(browser.current_url)
    wait(browser, lambda: by_id(browser, "glossary-box").get_attribute("open"))
    assert by_id(browser, "glossary").get_attribute("value") == "forty-two = quarante-trois\nseven = huit"
    clean_console.add(422)
    by_id(browser, "glossary").send_keys("\nten =")
    message = translate(server, text="forty-two", source_lang="en", target_lang="fr",
                        glossary={"forty-two": "quarante-trois", "seven": "huit", "ten": ""})["error"]["message"]
    assert message == "glossary: entry 3 has an empty term"
    wait(browser, lambda: by_id(browser, "error").text == message)


def test_swap_exchanges_languages_and_texts(server, browser, clean_console):
    clean_console.add(422)  # fr → en: the demo model translates from English only
    browser.get(server.url + "/?source=en&target=fr&q=forty-two")
    wait(browser, lambda: by_id(browser, "translation").get_attribute("value") == "quarante-deux")
    by_id(browser, "swap").click()
    assert by_id(browser, "source").get_attribute("value") == "fr"
    assert by_id(browser, "target").get_attribute("value") == "en"
    assert by_id(browser, "text").get_attribute("value") == "quarante-deux"
    message = translate(server, text="quarante-deux", source_lang="fr", target_lang="en")["error"]["message"]
    wait(browser, lambda: by_id(browser, "error").text == message)


def test_ctrl_enter_translates_with_the_beam_alternatives(server, browser):
    from selenium.webdriver.common.keys import Keys

    browser.get(server.url + "/?target=it&alternatives=2")
    wait(browser, lambda: by_id(browser, "target").get_attribute("value") == "it")
    by_id(browser, "as-you-type").click()
    by_id(browser, "text").send_keys("forty-two")
    time.sleep(0.6)  # past the typing pause: nothing is sent without the shortcut
    assert by_id(browser, "translation").get_attribute("value") == ""
    by_id(browser, "text").send_keys(Keys.CONTROL, Keys.ENTER)
    expected = translate(server, text="forty-two", source_lang="auto", target_lang="it", n_best=3,
                         beam_size=3)["translations"][0]
    wait(browser, lambda: by_id(browser, "translation").get_attribute("value"))
    assert by_id(browser, "translation").get_attribute("value") == expected["text"]
    shown = [li.text for li in by_id(browser, "alternatives-list").find_elements("tag name", "li")]
    assert shown == [a["text"] for a in expected["alternatives"]] and len(shown) == 2


def test_a_model_is_chosen_where_two_serve_the_pair(server, browser):
    from selenium.webdriver.support.ui import Select

    browser.get(server.url + "/?target=fr")
    wait(browser, lambda: by_id(browser, "model-choice").is_displayed())
    picker = Select(by_id(browser, "model"))
    assert [o.get_attribute("value") for o in picker.options] == ["", *MODELS]
    browser.execute_script("window.sent = []; const send = window.fetch;"  # what the page asks the API
                           "window.fetch = (path, init) => { window.sent.push(init?.body); return send(path, init); }")
    picker.select_by_value(MODELS[1])
    by_id(browser, "text").send_keys("forty-two")
    wait(browser, lambda: by_id(browser, "translation").get_attribute("value") == "quarante-deux")
    assert '"model":"demo-numbers-b"' in browser.execute_script("return window.sent.at(-1)")
    assert f"model={MODELS[1]}" in browser.current_url


VISIBLE_CONTROLS = """return [...document.querySelectorAll('button, select, input, textarea, output, a, label')]
  .filter((c) => c.getClientRects().length)
  .map((c) => [c.id || c.name || c.textContent.trim(), c.getBoundingClientRect().left,
               c.getBoundingClientRect().right]);"""


@pytest.mark.parametrize("width", NARROW_WIDTHS)
def test_the_page_reflows_on_a_phone_and_at_200_percent_zoom(server, browser, width):
    """Nothing scrolls sideways and every control lies inside the window, in each view."""
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                            {"width": width, "height": 800, "deviceScaleFactor": 1, "mobile": False})
    try:
        for view in ("text", "files", "generate"):
            browser.get(f"{server.url}/?view={view}&target=fr")
            wait(browser, lambda: by_id(browser, "target").get_attribute("value") == "fr")
            assert browser.execute_script("return document.documentElement.scrollWidth") <= width, view
            outside = [c for c in browser.execute_script(VISIBLE_CONTROLS) if c[1] < 0 or c[2] > width]
            assert outside == [], (view, outside)
    finally:
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


def press(browser, *keys) -> str:
    """Keys sent to whatever has the focus; the id of what has it then."""
    from selenium.webdriver.common.action_chains import ActionChains

    ActionChains(browser).send_keys(*keys).perform()
    return browser.execute_script("return document.activeElement.id")


def focus_order(browser, presses: int) -> list[str]:
    """The ids the Tab key moves through, from the top of the page."""
    from selenium.webdriver.common.keys import Keys

    browser.execute_script("document.activeElement.blur()")
    return [press(browser, Keys.TAB) for _ in range(presses)]


def tab_to(browser, id_: str) -> None:
    """The focus moved to `id_` with Tab alone, from the top of the page."""
    from selenium.webdriver.common.keys import Keys

    browser.execute_script("document.activeElement.blur()")
    for _ in range(30):
        if press(browser, Keys.TAB) == id_:
            return
    raise AssertionError(f"Tab never reaches #{id_}")


def test_the_page_works_by_keyboard_alone(server, browser):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    browser.get(server.url + "/?target=fr")
    wait(browser, lambda: by_id(browser, "target").get_attribute("value") == "fr")
    assert {"tab-text", "tab-files", "tab-generate", "source", "swap", "target", "model", "text", "as-you-type",
            "alternatives", "translate", "copy"} <= set(focus_order(browser, 20))
    tab_to(browser, "text")
    ActionChains(browser).send_keys("forty-two").key_down(Keys.CONTROL).send_keys(Keys.ENTER).key_up(Keys.CONTROL) \
        .perform()
    wait(browser, lambda: by_id(browser, "translation").get_attribute("value") == "quarante-deux")

    # each view's tab opened with Enter; its controls reachable in turn
    tab_to(browser, "tab-files")
    press(browser, Keys.ENTER)
    assert by_id(browser, "view-files").is_displayed() and not by_id(browser, "view-text").is_displayed()
    assert {"file", "translate-file"} <= set(focus_order(browser, 12))
    tab_to(browser, "tab-generate")
    press(browser, Keys.ENTER)
    assert by_id(browser, "view-generate").is_displayed()
    assert {"gen-model", "prompt", "generate"} <= set(focus_order(browser, 20))


def test_a_text_over_the_limit_shows_the_api_message(server, browser, clean_console):
    clean_console.add(422)
    text = "one " * (MAX_REQUEST_CHARS // 4) + "two"
    browser.get(server.url + "/?target=de")
    wait(browser, lambda: by_id(browser, "target").get_attribute("value") == "de")
    browser.execute_script("const t = document.getElementById('text'); t.value = arguments[0];"
                           "t.dispatchEvent(new Event('input'))", text)
    error = translate(server, text=text, source_lang="auto", target_lang="de")["error"]
    assert error["field"] == "text" and str(MAX_REQUEST_CHARS) in error["message"]
    wait(browser, lambda: by_id(browser, "error").text == error["message"])
    assert "over" in by_id(browser, "counter").get_attribute("class")


# A drop as Chromium delivers one: a DragEvent whose DataTransfer holds the file (selenium cannot drag from disk).
DROP = """const [name, base64, zone] = arguments;
const bytes = Uint8Array.from(atob(base64), (c) => c.charCodeAt(0));
const dropped = new DataTransfer();
dropped.items.add(new File([bytes], name));
document.getElementById(zone).dispatchEvent(new DragEvent("drop", {dataTransfer: dropped, bubbles: true}));"""


def upload(server, browser, downloads: Path, path: Path, dropped: bool = False) -> Path:
    """`path` translated by the page into French, chosen in the file picker or dropped on the page: the file it
    downloads."""
    browser.get(server.url + "/?view=files&target=fr")
    wait(browser, lambda: by_id(browser, "target").get_attribute("value") == "fr")
    if dropped:
        browser.execute_script(DROP, path.name, base64.b64encode(path.read_bytes()).decode(), "drop")
        assert by_id(browser, "file-status").text == f"{path.name} chosen."
    else:
        by_id(browser, "file").send_keys(str(path))
    by_id(browser, "translate-file").click()
    link = by_id(browser, "download")
    wait(browser, link.is_displayed)
    link.click()
    saved = downloads / f"{path.stem}.translated{path.suffix}"
    assert wait(browser, saved.exists)
    return saved


def test_a_txt_file_comes_back_translated(server, browser, downloads, tmp_path):
    path = tmp_path / "numbers.txt"
    path.write_text("forty-two\nseven hundred\n", encoding="utf-8")
    saved = upload(server, browser, downloads, path)
    expected = httpx.post(server.url + "/v1/translate/file", files={"file": (path.name, path.read_bytes())},
                          data={"target_lang": "fr"}, timeout=30)
    assert saved.read_bytes() == expected.content
    assert saved.read_text(encoding="utf-8") == "quarante-deux\nsept cents\n"


def test_a_docx_file_dropped_on_the_page_comes_back_translated(server, browser, downloads, tmp_path):
    import docx

    path = tmp_path / "letter.docx"
    document = docx.Document()
    sources = ["forty-two", "nine hundred and one"]
    for text in sources:
        document.add_paragraph(text)
    document.save(path)
    saved = upload(server, browser, downloads, path, dropped=True)
    expected = [t["text"] for t in translate(server, text=sources, target_lang="fr")["translations"]]
    assert [p.text for p in docx.Document(saved).paragraphs] == expected != sources


def test_a_refused_file_shows_the_api_message(server, browser, clean_console, tmp_path):
    clean_console.add(400)
    path = tmp_path / "scan.pdf"
    path.write_bytes(b"%PDF-1.4")
    browser.get(server.url + "/?view=files&target=fr")
    wait(browser, lambda: by_id(browser, "target").get_attribute("value") == "fr")
    by_id(browser, "file").send_keys(str(path))
    by_id(browser, "translate-file").click()
    answer = httpx.post(server.url + "/v1/translate/file", files={"file": (path.name, path.read_bytes())},
                        data={"target_lang": "fr"}, timeout=30)
    assert answer.status_code == 400
    wait(browser, lambda: by_id(browser, "error").text == answer.json()["error"]["message"])
    assert not by_id(browser, "download").is_displayed()


def test_a_generation_streams_and_the_stop_button_cancels_one(server, browser):
    browser.get(server.url + "/?view=generate&gen_target=de&prompt=nine+hundred+and+ninety-nine")
    wait(browser, lambda: by_id(browser, "gen-target").get_attribute("value") == "de")
    by_id(browser, "generate").click()
    expected = httpx.post(server.url + "/v1/generate", timeout=30, json={
        "text": "nine hundred and ninety-nine", "target_lang": "de", "model": "demo-numbers"}).json()
    wait(browser, lambda: by_id(browser, "gen-status").text.startswith("Finished"))
    assert by_id(browser, "gen-output").text == expected["text"]
    assert by_id(browser, "gen-status").text == (f"Finished ({expected['finish_reason']}), "
                                                 f"{expected['usage']['output_tokens']} tokens.")

    for knob, value in (("min_new_tokens", LONG_GENERATION), ("max_new_tokens", LONG_GENERATION),
                        ("temperature", 1.5), ("seed", 1)):
        browser.find_element("name", knob).send_keys(str(value))
    by_id(browser, "generate").click()
    assert by_id(browser, "gen-status").text == "Generating…"
    output = by_id(browser, "gen-output")
    wait(browser, lambda: int(output.get_attribute("data-events") or 0) >= 3)  # pieces arrive one by one
    assert Scrape.of(server.url).get("s2s_running_sequences") == 1
    by_id(browser, "stop").click()
    wait(browser, lambda: by_id(browser, "gen-status").text == "Stopped.")
    stopped_at = output.text
    # freed well before the rest of the generation (over a second) could have run
    assert eventually(lambda: Scrape.of(server.url).get("s2s_running_sequences") == 0, timeout=1.0)
    time.sleep(0.3)
    assert output.text == stopped_at and len(stopped_at.split()) < LONG_GENERATION


# Installed in the page by the speech tests: every request the page makes (its path and form) kept in
# window.sent, and every value the transcript box is given kept in window.shown.
WATCH_THE_PAGE = """
window.sent = [];
const fetch = window.fetch;
window.fetch = (path, init) => {
  window.sent.push({ path: String(path), form: init?.body });
  return fetch(path, init);
};
window.shown = [];
const box = document.getElementById("transcript");
const value = Object.getOwnPropertyDescriptor(HTMLTextAreaElement.prototype, "value");
Object.defineProperty(box, "value", { get() { return value.get.call(this); },
                                      set(text) { window.shown.push(text); value.set.call(this, text); } });
"""

# The last request the page sent: its path, its form's fields, and its file's name and bytes (base64).
LAST_SENT = """
const done = arguments[arguments.length - 1];
const { path, form } = window.sent.at(-1);
const file = form.get("file");
const reader = new FileReader();
reader.onload = () => done({ path, name: file.name, bytes: reader.result.split(",")[1],
                             fields: Object.fromEntries([...form].filter(([field]) => field !== "file")) });
reader.readAsDataURL(file);
"""


def open_speech_view(browser, url: str, query: str = "") -> None:
    browser.get(f"{url}/?view=speech{query}")
    wait(browser, lambda: by_id(browser, "tab-speech").is_displayed())
    browser.execute_script(WATCH_THE_PAGE)


def transcribed(browser, timeout: float = 120.0) -> str:
    """The transcript the page shows once it says Done, no error shown."""
    wait(browser, lambda: by_id(browser, "speech-status").text in ("Done.", ""), timeout)
    assert (by_id(browser, "speech-status").text, by_id(browser, "error").text) == ("Done.", "")
    return by_id(browser, "transcript").get_attribute("value")


def native_transcription(url: str, name: str, data: bytes) -> dict:
    answer = httpx.post(url + "/v1/transcribe", data={"format": "json"}, files={"file": (name, data)}, timeout=120)
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_a_transcript_streams_into_the_page_as_its_segments_come(speech_server, browser, tmp_path):
    """The plain transcript comes from OpenAI's stream, a delta a segment appended as it arrives; what the page
    ends with is the native API's whole answer for the same file."""
    audio = tmp_path / "speech.flac"
    audio.write_bytes(audio_bytes(speech(SPEECH_SECONDS), 16_000, ".flac"))
    open_speech_view(browser, speech_server.url)
    by_id(browser, "audio").send_keys(str(audio))
    by_id(browser, "transcribe").click()
    shown = transcribed(browser)
    expected = native_transcription(speech_server.url, audio.name, audio.read_bytes())
    assert shown == expected["text"]
    sent = browser.execute_async_script(LAST_SENT)
    assert (sent["path"], sent["fields"]["stream"], sent["name"]) == ("v1/audio/transcriptions", "true", audio.name)
    # each segment's text appended to what was shown: the text grew in steps, at most one a segment
    steps = browser.execute_script("return window.shown")
    growing = [text for text in steps if text]
    assert steps[0] == "" and growing[-1] == expected["text"]
    assert 2 <= len(set(growing)) <= len(expected["segments"])
    assert all(later.startswith(earlier) for earlier, later in zip(growing, growing[1:]))


def test_a_file_over_the_servers_audio_limit_is_not_sent(speech_server, browser, tmp_path):
    """The page reads the speech model's max_audio_bytes off /v1/models and refuses a larger file itself."""
    audio = tmp_path / "long.wav"
    audio.write_bytes(audio_bytes(speech(40.0), 16_000, ".wav"))  # 1.28 MB
    assert audio.stat().st_size > MAX_AUDIO_BYTES
    open_speech_view(browser, speech_server.url)
    by_id(browser, "audio").send_keys(str(audio))
    by_id(browser, "transcribe").click()
    wait(browser, lambda: by_id(browser, "error").text)
    assert by_id(browser, "error").text == "long.wav is 1.2 MB; this server takes audio files of 1.0 MB at most."
    assert browser.execute_script("return window.sent") == []


def test_subtitles_come_whole_from_the_native_route_with_a_link(speech_server, browser, tmp_path):
    audio = tmp_path / "speech.wav"
    audio.write_bytes(audio_bytes(speech(3.0), 16_000, ".wav"))
    open_speech_view(browser, speech_server.url, "&speech_format=vtt")
    by_id(browser, "audio").send_keys(str(audio))
    by_id(browser, "transcribe").click()
    shown = transcribed(browser)
    expected = httpx.post(speech_server.url + "/v1/transcribe", data={"format": "vtt"},
                          files={"file": (audio.name, audio.read_bytes())}, timeout=120)
    assert shown == expected.text and shown.startswith("WEBVTT")
    assert browser.execute_async_script(LAST_SENT)["path"] == "v1/transcribe"
    name = re.search(r"filename\*=UTF-8''(\S+)", expected.headers["content-disposition"])[1]  # speech.<lang>.vtt
    assert by_id(browser, "subtitles-download").text == f"Download {name}"


def test_a_recording_from_the_microphone_is_sent_as_a_wav_and_transcribed(speech_server, browser):
    """Chromium's fake microphone recorded for a second and a half: the page shows the time while it records, then
    sends a 16 kHz 16-bit mono WAV of about that long, which the server reads, and shows its transcript."""
    import io

    import numpy
    import soundfile

    open_speech_view(browser, speech_server.url)
    record, status = by_id(browser, "record"), by_id(browser, "speech-status")
    assert record.is_displayed() and record.text == "Record"
    record.click()
    wait(browser, lambda: status.text.startswith("Recording"))
    started = time.monotonic()
    time.sleep(RECORD_SECONDS)
    assert re.fullmatch(r"Recording 0:0[12] \(at most 5:00\)", status.text), status.text  # the server's limit
    assert record.text == "Stop" and not by_id(browser, "transcribe").is_enabled()
    record.click()
    recorded = time.monotonic() - started
    shown = transcribed(browser)
    sent = browser.execute_async_script(LAST_SENT)
    assert (sent["path"], sent["name"]) == ("v1/audio/transcriptions", "recording.wav")
    data = base64.b64decode(sent["bytes"])
    samples, rate = soundfile.read(io.BytesIO(data), dtype="float32")
    info = soundfile.info(io.BytesIO(data))
    assert (info.format, info.subtype, info.channels, rate) == ("WAV", "PCM_16", 1, 16_000)
    assert numpy.abs(samples).max() > 0.05  # the fake microphone's beep, not silence
    expected = native_transcription(speech_server.url, "recording.wav", data)
    # at least most of the time waited (a busy machine's audio thread may drop a little), at most the time between
    # the clicks
    assert 1.0 <= expected["duration"] <= recorded + 0.3, (expected["duration"], recorded)
    assert shown == expected["text"]
    assert by_id(browser, "audio").get_property("files")  # the recording is the chosen file, to send again


def test_a_browser_without_a_microphone_api_shows_no_record_button(speech_server, browser):
    hidden = browser.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument",
                                     {"source": "delete MediaDevices.prototype.getUserMedia;"})
    try:
        browser.get(speech_server.url + "/?view=speech")
        wait(browser, lambda: by_id(browser, "tab-speech").is_displayed())
        assert not by_id(browser, "record").is_displayed() and by_id(browser, "transcribe").is_displayed()
    finally:
        browser.execute_cdp_cmd("Page.removeScriptToEvaluateOnNewDocument", {"identifier": hidden["identifier"]})


def test_a_server_with_keys_asks_for_one(browser, clean_console):
    clean_console.add(401)
    with running_server("--no-ray", "--rate-limit-per-minute", str(RATE_LIMIT),
                        env={"SERVER_API_KEYS": "page-key"}) as keyed:
        browser.get(keyed.url + "/")
        wait(browser, lambda: by_id(browser, "key-form").is_displayed())
        refused = httpx.get(keyed.url + "/v1/models", timeout=10).json()["error"]["message"]
        assert by_id(browser, "error").text == refused
        by_id(browser, "api-key").send_keys("page-key\n")
        wait(browser, lambda: by_id(browser, "target").get_attribute("value"))
        assert not by_id(browser, "key-form").is_displayed()
        assert browser.execute_script("return localStorage.getItem('seq2seq-serve.api-key')") == "page-key"
        by_id(browser, "text").send_keys("forty-two")
        wait(browser, lambda: by_id(browser, "translation").get_attribute("value") == "zweiundvierzig")

        # past the key's requests a minute: the API's 429 message, and when to try again (its Retry-After)
        clean_console.add(429)
        answered = "return performance.getEntriesByType('resource').filter(e => e.name.endsWith('/v1/translate')).length"
        for _ in range(RATE_LIMIT + 1):
            before = browser.execute_script(answered)
            by_id(browser, "translate").click()
            wait(browser, lambda: browser.execute_script(answered) > before)
            if by_id(browser, "error").text:
                break
        wait(browser, lambda: by_id(browser, "error").text)
        refused = httpx.post(keyed.url + "/v1/translate", headers={"Authorization": "Bearer page-key"},
                             json={"text": "forty-two", "target_lang": "de"}, timeout=10)
        assert refused.status_code == 429
        shown = re.fullmatch(re.escape(refused.json()["error"]["message"]) + r" Try again in (\d+) s\.",
                             by_id(browser, "error").text)
        assert shown and 1 <= int(shown[1]) <= 60, by_id(browser, "error").text


def test_the_page_is_cached_and_costs_the_engine_nothing(server):
    page = httpx.get(server.url + "/")
    assert page.headers["cache-control"] == "no-cache" and page.headers["etag"]
    assert httpx.get(server.url + "/", headers={"if-none-match": page.headers["etag"]}).status_code == 304
    asset = page.text.split('src="', 1)[1].split('"', 1)[0]  # ui/<version>/app.js
    assert httpx.get(f"{server.url}/{asset}").headers["cache-control"] == "public, max-age=31536000, immutable"
    assert httpx.get(f"{server.url}/ui/0000/app.js").status_code == 404
    assert httpx.get(server.url + "/nothing").json() == {"detail": "Not Found"}
    assert "/" not in httpx.get(server.url + "/openapi.json").json()["paths"]


def test_no_ui_leaves_the_root_a_404():
    from fastapi.testclient import TestClient

    from server.__main__ import parse_args
    from server.api import create_app

    _, settings = parse_args(["--no-ui"])
    assert settings.ui is False
    client = TestClient(create_app(None, settings))  # the page's routes never reach a model
    assert client.get("/").status_code == 404 and client.get("/").json() == {"detail": "Not Found"}
