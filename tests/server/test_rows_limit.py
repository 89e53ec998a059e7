"""The rows a request needs against the batch's: a sentence's beams and the constraint rows its glossary terms add
(DecodeParams.rows) above max_batch_rows could never be admitted by the scheduler, so it is refused before it queues,
naming the limit, in each API's error shape; one whose terms add no rows still fits."""

import pickle

import pytest
from server_process import in_process_client

from server.errors import TooManyRows
from server.settings import Settings

ROWS = 4  # the batch's rows, and so the beam limit too (Settings.beam_limit)
TERMS = {"forty-two": "quarante-trois"}


@pytest.fixture(scope="module")
def client():
    with in_process_client(Settings(dtype="float32", max_batch_rows=ROWS, request_timeout_s=30)) as c:
        yield c


def test_beams_and_glossary_rows_over_the_batch_are_refused_naming_the_limit(client):
    body = {"text": "forty-two", "target_lang": "fr", "beam_size": ROWS, "glossary": TERMS}
    response = client.post("/v1/translate", json=body)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert (error["code"], error["field"], error["limit"]) == ("invalid_request", "beam_size", ROWS)
    assert error["message"].startswith(f"beam_size {ROWS} with the glossary's terms needs ")
    assert error["message"].endswith(f"decoding rows; the batch has {ROWS} (max_batch_rows)")


@pytest.mark.slow
def test_deepl_words_it_as_a_bad_request(client):
    created = client.post("/v2/glossaries", json={"name": "g", "source_lang": "en", "target_lang": "fr",
                                                  "entries": "forty-two\tquarante-trois", "entries_format": "tsv"})
    assert created.status_code == 201, created.text
    body = {"text": ["forty-two"], "source_lang": "EN", "target_lang": "FR",
            "glossary_id": created.json()["glossary_id"]}
    fits = client.post("/v2/translate", json=body)  # the model's 1 beam and the term's rows: within 4
    assert fits.status_code == 200, fits.text
    with in_process_client(Settings(dtype="float32", max_batch_rows=2, request_timeout_s=30)) as narrow:
        created = narrow.post("/v2/glossaries", json={"name": "g", "source_lang": "en", "target_lang": "fr",
                                                      "entries": "forty-two\tquarante-trois",
                                                      "entries_format": "tsv"})
        refused = narrow.post("/v2/translate", json={**body, "glossary_id": created.json()["glossary_id"]})
    assert refused.status_code == 400, refused.text
    assert set(refused.json()) == {"message"} and "(max_batch_rows)" in refused.json()["message"]


def test_a_glossary_whose_terms_are_absent_adds_no_rows(client):
    body = {"text": "sixty", "target_lang": "fr", "beam_size": ROWS, "glossary": TERMS}
    assert client.post("/v1/translate", json=body).status_code == 200


def test_the_error_crosses_processes_whole():
    error = TooManyRows(4, 8, 4)
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error) and vars(copy) == vars(error) and copy.args == error.args
