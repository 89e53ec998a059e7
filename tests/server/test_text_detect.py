"""Language detection per text (py3langid, restricted to the served source languages) and routing by detected
language: a mixed list gets each item its own language and its own model."""

import pytest
from fastapi.testclient import TestClient

from model import Translator, detect_language
from model.text.detect import _full_model
from server.front import dispatch
from server.api import create_app
from server.runtime.local import LocalModels
from server.front.registry import ModelRegistry
from server.settings import Settings

pytestmark = pytest.mark.slow

SETTINGS = Settings(dtype="float32", max_batch_rows=16, max_new_tokens=12)
ENGLISH = "The weather is lovely today and we are going for a long walk in the park."
GERMAN = "Das Wetter ist heute schön und wir gehen im Park lange spazieren."
FRENCH = "Il fait très beau aujourd'hui et nous allons faire une longue promenade dans le parc."


def test_detection_is_restricted_to_the_candidates_and_ranked():
    ranked = detect_language(GERMAN, ["eng_Latn", "deu_Latn", "fr_XX"])
    assert [lang for lang, _ in ranked][0] == "de" and {lang for lang, _ in ranked} == {"en", "de", "fr"}
    assert ranked[0][1] > 0.9 and all(0.0 <= p <= 1.0 for _, p in ranked)
    assert [p for _, p in ranked] == sorted((p for _, p in ranked), reverse=True)
    assert detect_language(GERMAN, ["en", "fr"])[0][0] in ("en", "fr")  # German is not a candidate
    assert detect_language(GERMAN, ["en"]) == [("en", 1.0)]  # one candidate: nothing to detect
    assert detect_language(GERMAN, ["tlh"]) == []  # a language py3langid does not know


@pytest.fixture(scope="module")
def served(checkpoint, family_checkpoints):
    """A Marian en→de/fr model and an NLLB-style model (202 languages) side by side."""
    paths = [str(checkpoint), str(family_checkpoints["nllb"])]
    models = LocalModels(SETTINGS, ModelRegistry.from_paths(paths))
    with TestClient(create_app(models, SETTINGS)) as client:
        yield client, models, checkpoint.name, family_checkpoints["nllb"]
    models.close()


def test_an_app_reads_the_detection_model_as_it_starts(served):
    """Not the first request that detects, on the event loop, holding up every other request meanwhile."""
    _, models, _, _ = served
    _full_model.cache_clear()
    with TestClient(create_app(models, SETTINGS)):
        assert _full_model.cache_info().currsize == 1


def test_detect_ranks_the_served_source_languages(served):
    _, models, _, _ = served
    ranked = dispatch.detect(models, FRENCH)
    assert ranked[0].language == "fr" and ranked[0].confidence > 0.9
    assert len(ranked) > 50  # every language the NLLB model serves and py3langid knows


def test_a_mixed_list_gets_each_item_its_own_language_and_model(served):
    client, _, marian, nllb = served
    texts = [GERMAN, ENGLISH, FRENCH, "", ENGLISH]
    response = client.post("/v1/translate", json={"text": texts, "source_lang": "auto", "target_lang": "fr"})
    assert response.status_code == 200, response.text
    body = response.json()
    detected = [t.get("detected_language", {}).get("language") for t in body["translations"]]
    assert detected == ["de", "en", "fr", None, "en"]
    assert set(body["model"].split(",")) == {marian, nllb.name}  # English to the bilingual model, the rest to NLLB
    expected = {
        "de": Translator.from_pretrained(nllb).translate([GERMAN], source_lang="de", target_lang="fr",
                                                         max_new_tokens=12)[0].text,
        "en": Translator.from_pretrained(marian_path(served)).translate([ENGLISH], target_lang="fr",
                                                                        max_new_tokens=12)[0].text}
    assert body["translations"][0]["text"] == expected["de"]
    assert body["translations"][1]["text"] == body["translations"][4]["text"] == expected["en"]
    assert body["translations"][3]["text"] == ""


def marian_path(served):
    _, models, marian, _ = served
    return models.registry.entries[marian].path


def test_a_single_source_model_needs_no_detection(served):
    client, _, marian, _ = served
    body = client.post("/v1/translate", json={"text": [GERMAN], "source_lang": "auto", "model": marian,
                                              "target_lang": "de"}).json()
    assert body["translations"][0]["detected_language"] == {"language": "en", "confidence": 1.0}


def test_a_missing_source_lang_keeps_the_models_default_in_the_native_api(served):
    client, _, _, nllb = served
    body = client.post("/v1/translate", json={"text": [GERMAN], "model": nllb.name, "target_lang": "fr"}).json()
    assert "detected_language" not in body["translations"][0]
