"""/v1/generate serving text-to-text models (T5 v1.1, BART, a MADLAD-style translator) side by side: text equal
to transformers' generate for greedy and beams, with the checkpoints' rules and per-request ones; streaming gives
the same text; MADLAD through /v1/translate with target_lang."""

import json

import pytest
import torch
from server_process import in_process_client
from text2text_fixtures import BART_SENTENCES, T5_SENTENCES
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from server.settings import Settings

pytestmark = pytest.mark.slow

SETTINGS = Settings(dtype="float32", max_batch_rows=16, max_new_tokens=30)
NAMES = ("t5_v1_1", "bart", "madlad")


@pytest.fixture(scope="module")
def served(text2text_checkpoints):
    paths = [str(text2text_checkpoints[name]) for name in NAMES]
    with in_process_client(SETTINGS, paths) as client:
        yield client, text2text_checkpoints


def expected(path, text: str, **kwargs) -> str:
    tok, model = AutoTokenizer.from_pretrained(path), AutoModelForSeq2SeqLM.from_pretrained(path).eval()
    with torch.no_grad():
        ids = model.generate(**tok([text], return_tensors="pt"), **kwargs)
    return tok.decode(ids[0], skip_special_tokens=True)


@pytest.mark.parametrize("name,text", [("t5_v1_1", T5_SENTENCES[0]), ("t5_v1_1", T5_SENTENCES[2]),
                                       ("bart", BART_SENTENCES[0]), ("bart", BART_SENTENCES[3])])
@pytest.mark.parametrize("request_rules", [{}, {"num_beams": 3, "length_penalty": 0.6},
                                           {"num_beams": 2, "repetition_penalty": 1.4, "no_repeat_ngram_size": 2},
                                           {"num_beams": 1, "min_new_tokens": 12}])
def test_generate_equals_transformers(served, name, text, request_rules):
    client, paths = served
    path = paths[name]
    body = {"model": path.name, "text": text, "max_new_tokens": 20, **request_rules}
    response = client.post("/v1/generate", json=body)
    assert response.status_code == 200, response.text
    assert response.json()["text"] == expected(path, text, max_new_tokens=20, **request_rules)


def test_streaming_gives_the_same_text(served):
    client, paths = served
    for name, text in (("t5_v1_1", T5_SENTENCES[1]), ("bart", BART_SENTENCES[0])):
        body = {"model": paths[name].name, "text": text, "max_new_tokens": 20}
        plain = client.post("/v1/generate", json=body).json()["text"]
        with client.stream("POST", "/v1/generate", json=body | {"stream": True}) as response:
            events = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: {")]
        assert "".join(e.get("text", "") for e in events) == plain
        assert events[-1]["finish_reason"] in ("eos", "length")


def test_madlad_translates_into_the_named_target(served):
    client, paths = served
    response = client.post("/v1/translate", json={"text": "The house by the river.", "target_lang": "fr",
                                                  "max_new_tokens": 20})
    assert response.status_code == 200, response.text
    assert response.json()["model"] == paths["madlad"].name  # the only model with French
    assert response.json()["translations"][0]["text"] == expected(paths["madlad"], "<2fr> The house by the river.",
                                                                  max_new_tokens=20)


def test_bad_generation_rules_get_422_naming_the_field(served):
    client, paths = served
    for body, field in (({"repetition_penalty": 0}, "repetition_penalty"),
                        # found by the fuzz test: a denormal penalty made the scores inf and failed the whole batch
                        ({"repetition_penalty": 5e-324, "seed": 60}, "repetition_penalty"),
                        ({"no_repeat_ngram_size": -1}, "no_repeat_ngram_size"),
                        ({"min_new_tokens": -2}, "min_new_tokens")):
        response = client.post("/v1/generate", json={"model": paths["t5_v1_1"].name, "text": "x", **body})
        assert response.status_code == 422 and response.json()["error"]["field"] == field, response.text


def test_madlad_texts_may_name_their_own_targets(served):
    """"<2de> ..." needs no target_lang, and every sentence of such a text goes into that target; a target_lang
    that disagrees is a 422 naming it, on /v1/translate and /v1/generate alike."""
    client, paths = served
    madlad, text = paths["madlad"].name, "The house by the river. The train leaves tomorrow."

    def translate(**body):
        response = client.post("/v1/translate", json={"model": madlad, "max_new_tokens": 20, **body})
        assert response.status_code == 200, response.text
        return [t["text"] for t in response.json()["translations"]]

    assert translate(text="<2de> " + text) == translate(text=text, target_lang="de")
    house = [translate(text="The house.", target_lang=target)[0] for target in ("de", "fr")]
    assert translate(text=["<2de> The house.", "<2fr> The house."]) == house
    generated = client.post("/v1/generate", json={"model": madlad, "text": "<2fr> The house.", "max_new_tokens": 20})
    assert generated.json()["text"] == expected(paths["madlad"], "<2fr> The house.", max_new_tokens=20)
    for route, body in (("/v1/translate", {"text": "<2de> " + text, "target_lang": "fr"}),
                        ("/v1/generate", {"text": "<2de> The house.", "target_lang": "fr"})):
        response = client.post(route, json={"model": madlad, **body})
        assert response.status_code == 422, response.text
        assert response.json()["error"]["field"] == "target_lang"
        assert "disagrees with the target the text names at its start ('de')" in response.json()["error"]["message"]


def test_an_opus_mt_text_may_name_its_target_itself():
    """A multi-target OPUS-MT model's ">>fr<< ..." (the demo model's): every sentence goes into French."""
    with in_process_client(SETTINGS) as client:
        def translate(**body):
            return client.post("/v1/translate", json=body).json()["translations"][0]["text"]

        french = translate(text="forty-two. seven.", target_lang="fr")
        assert translate(text=">>fr<< forty-two. seven.") == french
        assert french.endswith("sept")  # the second sentence too
