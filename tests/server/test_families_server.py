"""A server serving a Marian and an NLLB-style model side by side: language-pair routing, /v1/models, language
codes in every form, errors naming the field and the supported codes."""

import json

import pytest
from family_fixtures import FAMILY_SENTENCES
from server_process import in_process_client

from model import Translator
from server.settings import Settings

pytestmark = pytest.mark.slow

SETTINGS = Settings(dtype="float32", max_batch_rows=16, max_new_tokens=20)


@pytest.fixture(scope="module")
def served(checkpoint, family_checkpoints):
    paths = [str(checkpoint), str(family_checkpoints["nllb"])]
    with in_process_client(SETTINGS, paths) as client:
        yield client, checkpoint.name, family_checkpoints["nllb"]


def translate(client, **body):
    return client.post("/v1/translate", json={"text": "The frog drinks water.", "max_new_tokens": 12, **body})


def test_models_lists_both_with_their_languages(served):
    client, marian, nllb = served
    cards = {c["id"]: c for c in client.get("/v1/models").json()["data"]}
    assert set(cards) == {marian, nllb.name}
    assert cards[marian]["family"] == "marian" and cards[nllb.name]["family"] == "m2m_100"
    assert {lang["code"] for lang in cards[marian]["target_languages"]} == {"de", "fr"}
    assert [lang["code"] for lang in cards[marian]["source_languages"]] == ["en"]
    nllb_targets = {lang["code"]: lang["iso"] for lang in cards[nllb.name]["target_languages"]}
    assert len(nllb_targets) == 202 and nllb_targets["fra_Latn"] == "fr" and nllb_targets["arb_Arab"] == "ar"
    assert cards[nllb.name]["limits"]["max_new_tokens"] == 20  # the server's limit, below the model's 127


@pytest.mark.parametrize("source,target,routed", [
    ("en", "de", "marian"),  # both serve en→de: the bilingual model is more specific
    ("eng", ">>fr<<", "marian"),
    ("en", "es", "nllb"),  # only NLLB has Spanish
    ("eng_Latn", "spa_Latn", "nllb"),
    ("de", "fr", "nllb"),  # Marian's source is English
    (None, "zh-Hans", "nllb"),
])
def test_language_pairs_route_to_a_model_that_serves_them(served, source, target, routed):
    client, marian, nllb = served
    body = {"target_lang": target} | ({"source_lang": source} if source else {})
    response = translate(client, **body)
    assert response.status_code == 200, response.text
    assert response.json()["model"] == (marian if routed == "marian" else nllb.name)


def test_iso_codes_give_what_the_models_own_codes_give(served):
    client, _, nllb = served
    own = translate(client, model=nllb.name, source_lang="deu_Latn", target_lang="fra_Latn").json()
    iso = translate(client, model=nllb.name, source_lang="de", target_lang="fr").json()
    expected = Translator.from_pretrained(nllb).translate(["The frog drinks water."], source_lang="deu_Latn",
                                                          target_lang="fra_Latn", max_new_tokens=12)[0].text
    assert own["translations"][0]["text"] == iso["translations"][0]["text"] == expected


def test_a_missing_source_uses_the_models_default(served):
    client, _, nllb = served
    implicit = translate(client, model=nllb.name, target_lang="fr").json()
    explicit = translate(client, model=nllb.name, source_lang="eng_Latn", target_lang="fr").json()
    assert implicit["translations"] == explicit["translations"]
    assert implicit["usage"]["input_tokens"] == explicit["usage"]["input_tokens"]


@pytest.mark.parametrize("body,field,listed", [
    ({"target_lang": "xx"}, "target_lang", "fra_Latn"),
    ({"target_lang": "fr", "source_lang": "qq"}, "source_lang", "eng_Latn"),
    ({"target_lang": "zh"}, "target_lang", "zho_Hant"),  # ambiguous: simplified or traditional
    ({}, "target_lang", "fra_Latn"),  # NLLB forces the target's token: a translation must name it
])
def test_unknown_language_codes_get_422_naming_the_field(served, body, field, listed):
    client, _, nllb = served
    response = translate(client, model=nllb.name, **body)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["field"] == field and field in error["message"] and listed in error["message"]
    assert listed in error["limit"] or listed in error["message"]


def test_streaming_a_translation_gives_the_translators_text(served):
    client, _, nllb = served
    translator = Translator.from_pretrained(nllb)
    # The first test sentence the random model turns into some text (it often says only language tokens).
    text, expected = next((t, out) for t in FAMILY_SENTENCES for out in translator.translate(
        [t], source_lang="eng_Latn", target_lang="fra_Latn", max_new_tokens=12) if out.text)
    body = {"text": text, "model": nllb.name, "source_lang": "en", "target_lang": "fr", "max_new_tokens": 12,
            "stream": True}
    with client.stream("POST", "/v1/generate", json=body) as response:
        assert response.status_code == 200
        events = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: {")]
    assert "".join(e["text"] for e in events) == expected.text
    assert events[-1]["usage"]["output_tokens"] == len(expected.token_ids)  # the language token counts
