"""Documents through the native API (in process, the demo model): a 5,000-character text keeps its paragraphs and
lines and each sentence translates as it does alone; split_sentences "0"; HTML, inline tags around the words the
cross-attention alignment gives; documents too large."""

import random
import re

import pytest
from num2words import num2words
from oracles import aligned_span
from server_process import in_process_client

from model import AlignmentInput, Translator, word_alignments
from server.settings import Settings

pytestmark = pytest.mark.slow

SETTINGS = Settings(dtype="float32", max_batch_rows=32, max_document_chars=8000, max_input_tokens=64)


@pytest.fixture(scope="module")
def client():
    with in_process_client(SETTINGS) as c:
        yield c


@pytest.fixture(scope="module")
def translator():
    return Translator.from_pretrained()


def sentences(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [num2words(rng.randint(0, 999_999)) + "." for _ in range(n)]


def test_a_long_multi_paragraph_text_keeps_its_structure_and_each_sentence_translates_alone(client, translator):
    # paragraphs of lines of sentences, joined by the separators chosen here; the server must find them again
    rng, said, layout = random.Random(1), [], []
    while sum(len(s) for s in said) + len(said) < 5000:
        line = sentences(rng.randint(1, 3), seed=len(said))
        said += line
        layout.append(line)
    separators = [rng.choice(["\n", "\n\n", "\n  \n"]) for _ in layout]
    text = "".join(" ".join(line) + sep for line, sep in zip(layout, separators))
    assert len(text) >= 5000
    response = client.post("/v1/translate", json={"text": text, "target_lang": "de"})
    assert response.status_code == 200, response.text
    alone = iter(t.text for t in translator.translate(said, target_lang="de"))
    expected = "".join(" ".join(next(alone) for _ in line) + sep for line, sep in zip(layout, separators))
    assert response.json()["translations"][0]["text"] == expected


def test_split_sentences_0_keeps_a_text_as_one_unit(client, translator):
    text = "forty-two. seven."
    one = client.post("/v1/translate", json={"text": text, "target_lang": "fr", "split_sentences": "0"}).json()
    assert one["translations"][0]["text"] == translator.translate([text], target_lang="fr")[0].text
    split = client.post("/v1/translate", json={"text": text, "target_lang": "fr"}).json()
    assert split["usage"]["input_tokens"] > one["usage"]["input_tokens"]  # two sequences, each with its </s>


def test_html_is_translated_around_its_tags(client, translator):
    html = '<p class="n">forty-two</p>\n<p>one <b>hundred</b> and seven</p><script>var x = "two";</script>'
    body = client.post("/v1/translate", json={"text": html, "target_lang": "es", "format": "html"}).json()
    out = body["translations"][0]["text"]
    expected = [t.text for t in translator.translate(["forty-two", "one hundred and seven"], target_lang="es")]
    assert out.startswith(f'<p class="n">{expected[0]}</p>\n<p>')
    assert out.count("<b>") == out.count("</b>") == 1 and out.endswith('</p><script>var x = "two";</script>')
    assert out.replace("<b>", "").replace("</b>", "").split("<p>")[1].startswith(expected[1])


def test_inline_tags_wrap_the_target_words_the_alignment_gives(client, translator):
    html = '<p><span class="a" data-n=\'1 &amp; 2\'>one hundred</span> and <i>seven</i></p>'
    out = client.post("/v1/translate", json={"text": html, "target_lang": "es", "format": "html"}).json()
    out = out["translations"][0]["text"]
    assert re.findall(r"<[^>]*>", out) == re.findall(r"<[^>]*>", html)  # each tag once, attributes byte for byte
    unit, bundle = "one hundred and seven", translator.bundle
    translation = translator.translate([unit], target_lang="es")[0]
    alignment, = word_alignments(bundle, [AlignmentInput(unit, bundle.source(unit, None, "es").ids,
                                                         translation.token_ids)])
    assert re.sub(r"<[^>]*>", "", out) == translation.text
    span, italic = (aligned_span(unit, words, translation.text, alignment) for words in ("one hundred", "seven"))
    assert f"<span class=\"a\" data-n='1 &amp; 2'>{span}</span>" in out and f"<i>{italic}</i>" in out


def test_texts_over_the_document_limit_are_refused_naming_it(client):
    response = client.post("/v1/translate", json={"text": ["ok", "x" * 8001], "target_lang": "de"})
    assert response.status_code == 422
    assert response.json()["error"]["field"] == "text[1]" and response.json()["error"]["limit"] == 8000


def test_broken_xml_is_a_400_naming_the_text(client):
    response = client.post("/v1/translate", json={"text": "<a>one</b>", "target_lang": "de", "format": "xml"})
    assert response.status_code == 400 and response.json()["error"]["field"] == "text"
    assert "not well-formed" in response.json()["error"]["message"]
