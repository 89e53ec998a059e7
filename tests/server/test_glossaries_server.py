"""Glossaries in process (demo model, no keys: one namespace): the limits and bad entries in each API's error shape
(native 422 naming the field and the limit, DeepL's 400/404/415/456 `{"message"}`), a stored or inline glossary
reaching the translation job, and the store itself (owners apart, merging, a file that cannot serve)."""

import pytest
from server_process import in_process_client

from server.errors import TooManyGlossaries
from server.glossary_store import GlossaryStore, NewDictionary
from server.settings import Settings
from server.sqlite_file import StoreError

LIMITS = {"max_glossary_term_bytes": 16, "max_glossary_bytes": 80, "max_glossaries": 2}


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    """The app over a store of its own (a module's fixture is made before the test's own working directory)."""
    store = tmp_path_factory.mktemp("store") / "keys.sqlite"
    with in_process_client(Settings(dtype="float32", key_store=str(store), **LIMITS)) as c:
        yield c


@pytest.fixture
def v2_glossary(client):
    """An en→fr glossary made through DeepL's v2 API, deleted afterwards."""
    r = client.post("/v2/glossaries", json={"name": "numbers", "source_lang": "EN", "target_lang": "FR",
                                            "entries": "forty-two\tquarante-trois\nseven\thuit",
                                            "entries_format": "tsv"})
    assert r.status_code == 201, r.text
    yield r.json()["glossary_id"]
    client.delete(f"/v2/glossaries/{r.json()['glossary_id']}")


def translate(client, **body):
    return client.post("/v1/translate", json={"text": ["one hundred and forty-two"], "source_lang": "en",
                                              "target_lang": "fr", **body})


# ---- the job's glossary --------------------------------------------------------------------------------------

def test_an_inline_glossary_reaches_the_job(client, jobs):
    r = translate(client, glossary={" forty-two ": "quarante-trois", "seven": "huit"})
    assert r.status_code == 200, r.text
    assert jobs[-1].glossary == (("forty-two", "quarante-trois"), ("seven", "huit"))


def test_a_stored_glossary_reaches_the_job_through_v1_and_deepl(client, jobs, v2_glossary):
    assert translate(client, glossary_id=v2_glossary).status_code == 200
    r = client.post("/v2/translate", json={"text": ["seven"], "source_lang": "EN", "target_lang": "FR",
                                           "glossary_id": v2_glossary})
    assert r.status_code == 200, r.text
    assert [job.glossary for job in jobs] == [(("forty-two", "quarante-trois"), ("seven", "huit"))] * 2


def test_deepl_glossary_ids_keep_the_terms_of_each_the_first_one_winning(client, jobs, v2_glossary):
    r = client.post("/v2/glossaries", json={"name": "more", "source_lang": "EN", "target_lang": "FR",
                                            "entries": "seven\tneuf\nnine\tdix", "entries_format": "tsv"})
    other = r.json()["glossary_id"]
    try:
        body = {"text": ["seven"], "source_lang": "EN", "target_lang": "FR"}
        r = client.post("/v2/translate", json={**body, "glossary_ids": [v2_glossary, other]})
        assert r.status_code == 200, r.text
        assert jobs[-1].glossary == (("forty-two", "quarante-trois"), ("seven", "huit"), ("nine", "dix"))
        both = client.post("/v2/translate", json={**body, "glossary_ids": [other], "glossary_id": v2_glossary})
        assert both.status_code == 400 and "glossary_ids" in both.json()["message"]
        many = client.post("/v2/translate", json={**body, "glossary_ids": [other] * 6})
        assert many.status_code == 400 and "glossary_ids" in many.json()["message"]
    finally:
        client.delete(f"/v2/glossaries/{other}")


def test_a_glossary_pair_matches_any_code_of_its_languages(client, jobs, v2_glossary):
    r = translate(client, glossary_id=v2_glossary, source_lang="eng", target_lang="FR-CA")
    assert r.status_code == 200, r.text
    assert jobs[-1].glossary == (("forty-two", "quarante-trois"), ("seven", "huit"))


def test_a_file_takes_a_glossary_too(client, jobs, v2_glossary):
    for form in ({"glossary_id": v2_glossary}, {"glossary": '{"seven": "huit"}'}):
        r = client.post("/v1/translate/file", files={"file": ("n.txt", b"seven\n", "text/plain")},
                        data={"source_lang": "en", "target_lang": "fr", **form})
        assert r.status_code == 200, r.text
    assert [job.glossary for job in jobs] == [(("forty-two", "quarante-trois"), ("seven", "huit")),
                                              (("seven", "huit"),)]


def test_no_glossary_is_an_empty_one(client, jobs):
    assert translate(client).status_code == 200
    assert jobs[-1].glossary == ()


# ---- native errors -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("glossary, message, limit", [
    ({"a" * 17: "b"}, "glossary: the term 'aaaaaaaaaaaaaaaaa' has 17 bytes (UTF-8); at most 16", 16),
    ({"é" * 9: "b"}, "glossary: the term 'ééééééééé' has 18 bytes (UTF-8); at most 16", 16),
    ({f"term {i}": "target" for i in range(8)}, "glossary: the glossary has 111 bytes of entries; at most 80", 80),
    ({"seven": " "}, "glossary: entry 1 has an empty term", None),
    ({"se\u2028ven": "huit"}, "glossary: entry 1: the term 'se\\u2028ven' contains a control character", None),
    ({"seven": "huit", " seven": "sept"}, 'glossary: entry 2 duplicates the source term "seven"', None),
    ({}, "glossary: the glossary has no entries", None),
])
def test_an_inline_glossary_is_checked(client, glossary, message, limit):
    r = translate(client, glossary=glossary)
    assert r.status_code == 422, r.text
    expected = {"code": "invalid_request", "message": message, "field": "glossary"}
    assert r.json()["error"] == expected | ({"limit": limit} if limit else {})


def test_half_a_utf16_pair_is_refused_in_a_term_and_a_name(client):
    """JSON may escape half a surrogate pair, which no UTF-8 text (nor SQLite) holds: a 4xx, not a 500."""
    body = '{"text": "seven", "source_lang": "en", "target_lang": "fr", "glossary": {"se\\ud800": "huit"}}'
    r = client.post("/v1/translate", content=body, headers={"content-type": "application/json"})
    assert (r.status_code, r.json()["error"]["message"]) == (
        422, "glossary: entry 1: the term 'se\\ud800' contains a lone surrogate")
    body = '{"name": "n\\udfff", "source_lang": "en", "target_lang": "fr", "entries": "seven\\thuit"}'
    r = client.post("/v2/glossaries", content=body, headers={"content-type": "application/json"})
    assert (r.status_code, r.json()) == (400, {"message": "name: the name contains a lone surrogate"})


def test_glossary_id_needs_both_languages_and_one_glossary(client, v2_glossary):
    r = translate(client, glossary_id=v2_glossary, source_lang="auto")
    assert (r.status_code, r.json()["error"]["field"]) == (422, "source_lang")
    r = translate(client, glossary_id=v2_glossary, glossary={"seven": "huit"})
    assert (r.status_code, r.json()["error"]["field"]) == (422, "glossary")
    r = translate(client, glossary_id=v2_glossary, target_lang="de")
    assert (r.status_code, r.json()["error"]["field"]) == (422, "glossary_id")
    assert "no dictionary from en to de" in r.json()["error"]["message"]


def test_an_unknown_glossary_is_a_404(client):
    r = translate(client, glossary_id="00000000-0000-0000-0000-000000000000")
    assert r.status_code == 404
    assert r.json()["error"] == {"code": "glossary_not_found", "message": "Glossary not found", "field": "glossary_id"}


def test_native_glossaries_crud_and_limits(client):
    body = {"name": "n", "dictionaries": [{"source_lang": "en", "target_lang": "de", "entries": {"one": "zwei"}}]}
    first = client.post("/v1/glossaries", json=body)
    assert first.status_code == 201, first.text
    glossary_id = first.json()["id"]
    second = client.post("/v1/glossaries", json=body)
    try:
        r = client.post("/v1/glossaries", json=body)  # max_glossaries = 2
        assert r.status_code == 422
        assert r.json()["error"]["limit"] == 2 and "maximum number of glossaries (2)" in r.json()["error"]["message"]
        r = client.patch(f"/v1/glossaries/{glossary_id}", json={"name": "renamed", "dictionaries": [
            {"source_lang": "EN-GB", "target_lang": "de", "entries": {"two": "drei", "one": "eins"}}]})
        assert r.status_code == 200, r.text
        assert (r.json()["name"], r.json()["dictionaries"]) == (
            "renamed", [{"source_lang": "en", "target_lang": "de", "entry_count": 2}])
        r = client.get(f"/v1/glossaries/{glossary_id}/entries", params={"source_lang": "en", "target_lang": "de"})
        assert r.json() == {"source_lang": "en", "target_lang": "de", "entries": {"one": "eins", "two": "drei"}}
        r = client.post("/v1/glossaries", json={"name": "x", "dictionaries": [
            {"source_lang": "en", "target_lang": "ja", "entries": {"one": "ichi"}}]})
        assert (r.status_code, r.json()["error"]["field"]) == (422, "dictionaries[0]")
        assert [g["id"] for g in client.get("/v1/glossaries").json()["glossaries"]] == [
            glossary_id, second.json()["id"]]
    finally:
        for made in (first, second):
            assert client.delete(f"/v1/glossaries/{made.json()['id']}").status_code == 204
    assert client.get(f"/v1/glossaries/{glossary_id}").status_code == 404


# ---- DeepL's errors ------------------------------------------------------------------------------------------

def create_v2(client, **fields):
    body = {"name": "n", "source_lang": "en", "target_lang": "de", "entries": "one\tzwei", "entries_format": "tsv"}
    return client.post("/v2/glossaries", json=body | fields)


@pytest.mark.parametrize("fields, status, message", [
    ({"name": ""}, 400, "Parameter 'name' not specified."),
    ({"entries": "one\tzwei\none\tdrei"}, 400, 'entries: entry 2 duplicates the source term "one"'),
    ({"entries": "one zwei"}, 400, "entries: entry 1 has no tab between its source and target terms"),
    ({"entries": "one\tzwei\tdrei"}, 400, "entries: entry 1 has more than one tab"),
    ({"entries": "one,zwei\r\n\"two\",\"d\x07rei\"", "entries_format": "csv"}, 400,
     "entries: entry 2: the term 'd\\x07rei' contains a control character"),
    ({"entries": "x" * 17 + "\tzwei"}, 400, "entries: the term 'xxxxxxxxxxxxxxxxx' has 17 bytes (UTF-8); at most 16"),
    ({"entries_format": "xlsx"}, 400, "Unsupported entry format specified: 'xlsx' (tsv or csv)"),
    ({"target_lang": "ja"}, 400, "Unsupported glossary source and target language pair"),
])
def test_deepl_create_errors(client, fields, status, message):
    r = create_v2(client, **fields)
    assert (r.status_code, r.json()) == (status, {"message": message})


def test_deepl_create_from_a_form_with_csv(client):
    r = client.post("/v2/glossaries", data={"name": "form", "source_lang": "EN-US", "target_lang": "ES",
                                            "entries": 'seven,siete\n"one, two",tres', "entries_format": "csv"})
    assert r.status_code == 201, r.text
    assert {k: r.json()[k] for k in ("name", "source_lang", "target_lang", "entry_count")} == {
        "name": "form", "source_lang": "en", "target_lang": "es", "entry_count": 2}
    r = client.get(f"/v2/glossaries/{r.json()['glossary_id']}/entries")
    assert r.text == "seven\tsiete\none, two\ttres"
    assert client.delete(r.url.path.removesuffix("/entries")).status_code == 204


def test_deepl_glossary_count_is_456_and_entries_need_tsv(client):
    made = [create_v2(client).json()["glossary_id"] for _ in range(2)]
    try:
        r = create_v2(client)
        assert r.status_code == 456
        assert r.json() == {"message": "the maximum number of glossaries (2) has been reached: delete one first"}
        r = client.get(f"/v2/glossaries/{made[0]}/entries", headers={"Accept": "application/json"})
        assert (r.status_code, r.json()) == (415, {"message": "No supported media type specified in Accept header"})
        r = client.get(f"/v2/glossaries/{made[0]}/entries", headers={"Accept": "text/tab-separated-values"})
        assert (r.status_code, r.text, r.headers["content-type"]) == (
            200, "one\tzwei", "text/tab-separated-values; charset=UTF-8")
    finally:
        for glossary_id in made:
            client.delete(f"/v2/glossaries/{glossary_id}")


def test_deepl_translate_with_a_glossary_needs_source_lang_and_its_pair(client, v2_glossary):
    body = {"text": ["seven"], "target_lang": "FR", "glossary_id": v2_glossary}
    r = client.post("/v2/translate", json=body)
    assert (r.status_code, r.json()) == (
        400, {"message": "Use of a glossary requires the source_lang parameter to be specified"})
    r = client.post("/v2/translate", data={**body, "source_lang": "EN", "target_lang": "DE"})
    assert r.status_code == 400 and "no dictionary from en to de" in r.json()["message"]
    r = client.post("/v2/translate", json={**body, "source_lang": "EN", "glossary_id": "not-a-glossary"})
    assert (r.status_code, r.json()) == (404, {"message": "Glossary not found"})


def test_deepl_v3_glossary_too_large_after_a_merge(client):
    r = client.post("/v3/glossaries", json={"name": "m", "dictionaries": [
        {"source_lang": "en", "target_lang": "fr", "entries": "one\tun", "entries_format": "tsv"}]})
    glossary_id = r.json()["glossary_id"]
    try:
        big = "\n".join(f"term {i}\ttargetss" for i in range(5))  # 79 bytes: fits alone, not with the 6 there
        r = client.patch(f"/v3/glossaries/{glossary_id}", json={"dictionaries": [
            {"source_lang": "en", "target_lang": "de", "entries": big, "entries_format": "tsv"}]})
        assert (r.status_code, r.json()) == (
            400, {"message": "entries: the glossary has 85 bytes of entries; at most 80"})
        assert client.get(f"/v3/glossaries/{glossary_id}").json()["dictionaries"] == [
            {"source_lang": "en", "target_lang": "fr", "entry_count": 1}]  # nothing of the refused merge is kept
    finally:
        client.delete(f"/v3/glossaries/{glossary_id}")


# ---- the store ------------------------------------------------------------------------------------------------

def test_the_store_keeps_owners_apart(tmp_path):
    store = GlossaryStore(tmp_path / "store.sqlite")
    entries = (("one", "un"),)
    mine = store.create("a", "mine", [NewDictionary("en", "fr", entries)], 1, 100)
    with pytest.raises(TooManyGlossaries):
        store.create("a", "more", [NewDictionary("en", "fr", entries)], 1, 100)
    theirs = store.create("b", "theirs", [NewDictionary("en", "fr", entries)], 1, 100)
    assert [g.id for g in store.glossaries("a")] == [mine.id]
    assert store.get("b", mine.id) is None and store.entries("b", mine.id, "en", "fr") is None
    assert not store.delete("b", mine.id) and not store.delete_dictionary("b", mine.id, "en", "fr")
    assert store.update("b", mine.id, "taken", [], [], 100) is None
    assert store.entries("a", mine.id, "en", "fr") == entries and store.get("b", theirs.id).name == "theirs"


def test_a_file_that_is_not_a_database_stops_the_store(tmp_path):
    path = tmp_path / "keys.sqlite"
    path.write_bytes(b"not a database" * 100)
    with pytest.raises(StoreError, match=f"glossary store {path}: file is not a database"):
        GlossaryStore(path)
