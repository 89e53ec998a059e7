"""DeepL's glossaries through a real server (python -m server --no-ray, demo model, three API keys, at most 3
glossaries a key): the official `deepl` client unchanged (every v2 and v3 glossary method, translate_text and a
document with a glossary, its exceptions), a Weblate-like sync over plain HTTP, two keys that never see each other's
glossaries, and the glossaries kept across a restart. One server process, restarted once at the end."""

import contextlib
from datetime import datetime

import deepl
import httpx
import pytest
from deepl.api_data import MultilingualGlossaryDictionaryEntries as Dictionary
from server_process import eventually, running_server

KEY, OTHER_KEY, WEBLATE_KEY = "glossary-key", "other-glossary-key", "weblate-key"
FRENCH = {"forty-two": "quarante-trois", "seven": "huit"}  # different from what the model says: only a kept glossary


class Served:
    """The module's server; `restart` stops it and starts another on the same store file."""

    def __init__(self, store: str):
        self.store, self.stack = store, contextlib.ExitStack()
        self.start()

    def start(self) -> None:
        server = self.stack.enter_context(running_server(
            "--no-ray", "--max-glossaries", "3",
            env={"SERVER_API_KEYS": ",".join((KEY, OTHER_KEY, WEBLATE_KEY)), "SERVER_KEY_STORE": self.store}))
        self.url = server.url

    def restart(self) -> None:
        self.stack.close()
        self.stack = contextlib.ExitStack()
        self.start()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    served = Served(str(tmp_path_factory.mktemp("glossaries") / "keys.sqlite"))
    yield served
    served.stack.close()


@pytest.fixture
def client(served):
    return deepl.DeepLClient(KEY, server_url=served.url)


@pytest.fixture
def glossary(client):
    """An EN→FR v2 glossary of this key, deleted afterwards (a test that deletes it says so)."""
    made = client.create_glossary("numbers", "EN", "FR", FRENCH)
    yield made
    with contextlib.suppress(deepl.GlossaryNotFoundException):
        client.delete_glossary(made)


def test_language_pairs_are_what_the_served_models_translate(client):
    pairs = {(p.source_lang, p.target_lang) for p in client.get_glossary_languages()}
    assert pairs == {("en", "de"), ("en", "fr"), ("en", "es"), ("en", "it")}


def test_v2_create_list_get_entries_delete(client, glossary):
    assert (glossary.name, glossary.ready, glossary.source_lang, glossary.target_lang, glossary.entry_count) == (
        "numbers", True, "EN", "FR", 2)
    assert abs((datetime.now(glossary.creation_time.tzinfo) - glossary.creation_time).total_seconds()) < 60
    assert glossary.glossary_id in [g.glossary_id for g in client.list_glossaries()]
    got = client.get_glossary(glossary.glossary_id)
    assert (got.glossary_id, got.name, got.creation_time, got.entry_count) == (
        glossary.glossary_id, "numbers", glossary.creation_time, 2)
    assert client.get_glossary_entries(glossary) == FRENCH
    client.delete_glossary(glossary)
    with pytest.raises(deepl.GlossaryNotFoundException):
        client.get_glossary(glossary.glossary_id)
    with pytest.raises(deepl.GlossaryNotFoundException):
        client.delete_glossary(glossary.glossary_id)


def test_v2_from_csv_drops_regional_variants(client):
    made = client.create_glossary_from_csv("csv", "EN-GB", "DE", 'seven,acht\n"forty-two","dreiundvierzig",en,de\n')
    try:
        assert (made.source_lang, made.target_lang, made.entry_count) == ("EN", "DE", 2)
        assert client.get_glossary_entries(made) == {"seven": "acht", "forty-two": "dreiundvierzig"}
    finally:
        client.delete_glossary(made)


def test_deepl_errors(client):
    with pytest.raises(deepl.GlossaryNotFoundException):
        client.get_glossary("00000000-0000-0000-0000-000000000000")
    with pytest.raises(deepl.DeepLException, match="Unsupported glossary source and target language pair") as raised:
        client.create_glossary("x", "EN", "JA", {"seven": "nana"})
    assert raised.value.http_status_code == 400
    with pytest.raises(deepl.DeepLException, match='entry 2 duplicates the source term "seven"'):
        client.create_glossary_from_csv("x", "EN", "DE", "seven,acht\nseven,sieben")
    made = [client.create_glossary(f"g{i}", "EN", "DE", {"seven": "acht"}) for i in range(3)]
    try:
        with pytest.raises(deepl.QuotaExceededException, match=r"maximum number of glossaries \(3\)"):
            client.create_glossary("one too many", "EN", "DE", {"seven": "acht"})
    finally:
        for g in made:
            client.delete_glossary(g)


def test_translate_with_a_glossary_needs_its_source_lang(served, glossary):
    r = httpx.post(f"{served.url}/v2/translate", headers={"Authorization": f"DeepL-Auth-Key {KEY}"},
                   json={"text": ["seven"], "target_lang": "FR", "glossary_id": glossary.glossary_id})
    assert (r.status_code, r.json()) == (
        400, {"message": "Use of a glossary requires the source_lang parameter to be specified"})


def test_translate_text_keeps_the_glossary_terms(client, glossary):
    """Needs the engine to keep TranslationJob.glossary (another branch): the model alone says quarante-deux."""
    results = client.translate_text(["one hundred and forty-two", "seven thousand"], source_lang="EN",
                                    target_lang="FR", glossary=glossary)
    assert "quarante-trois" in results[0].text, results[0].text
    assert "huit" in results[1].text, results[1].text


def test_translate_document_keeps_the_glossary_terms(client, glossary):
    """A .txt document job with the glossary: each of its paragraphs keeps the glossary's target terms."""
    handle = client.translate_document_upload(b"one hundred and forty-two\n\nseven thousand", filename="n.txt",
                                              source_lang="EN", target_lang="FR", glossary=glossary)
    assert eventually(lambda: client.translate_document_get_status(handle).done, 30)
    forty_two, seven = client.translate_document_download(handle).content.decode().split("\n\n")
    assert "quarante-trois" in forty_two and "huit" in seven, (forty_two, seven)


def test_v3_multilingual_glossary(client):
    made = client.create_multilingual_glossary("multi", [
        Dictionary("EN", "FR", FRENCH),
        Dictionary("EN-US", "ES", {"seven": "ocho"})])
    try:
        assert [(d.source_lang, d.target_lang, d.entry_count) for d in made.dictionaries] == [
            ("EN", "FR", 2), ("EN", "ES", 1)]
        assert made.glossary_id in [g.glossary_id for g in client.list_multilingual_glossaries()]
        assert made.glossary_id not in [g.glossary_id for g in client.list_glossaries()]  # v2 shows one pair
        assert client.get_multilingual_glossary(made.glossary_id).name == "multi"

        updated = client.update_multilingual_glossary_dictionary(
            made, Dictionary("EN", "FR", {"seven": "sept", "ten": "onze"}))
        assert [(d.source_lang, d.entry_count) for d in updated.dictionaries if d.target_lang == "FR"] == [("EN", 3)]
        entries = client.get_multilingual_glossary_entries(made, "EN", "FR").dictionaries[0]
        assert (entries.source_lang, entries.target_lang) == ("en", "fr")
        assert deepl.util.convert_tsv_to_dict(entries.entries) == {
            "forty-two": "quarante-trois", "seven": "sept", "ten": "onze"}

        replaced = client.replace_multilingual_glossary_dictionary(
            made, Dictionary("EN", "FR", {"one": "deux"}))
        assert (replaced.source_lang, replaced.target_lang, replaced.entry_count) == ("EN", "FR", 1)
        assert client.update_multilingual_glossary_name(made, "renamed").name == "renamed"

        client.delete_multilingual_glossary_dictionary(made, source_lang="EN", target_lang="ES")
        assert [(d.source_lang, d.target_lang) for d in client.get_multilingual_glossary(made.glossary_id)
                .dictionaries] == [("EN", "FR")]
        with pytest.raises(deepl.GlossaryNotFoundException):
            client.get_multilingual_glossary_entries(made, "EN", "ES")
    finally:
        client.delete_multilingual_glossary(made)
    with pytest.raises(deepl.GlossaryNotFoundException):
        client.get_multilingual_glossary(made.glossary_id)


def test_two_keys_never_see_each_others_glossaries(served, client, glossary):
    other = deepl.DeepLClient(OTHER_KEY, server_url=served.url)
    theirs = other.create_glossary("theirs", "EN", "DE", {"seven": "acht"})
    try:
        assert glossary.glossary_id not in [g.glossary_id for g in other.list_glossaries()]
        assert theirs.glossary_id not in [g.glossary_id for g in client.list_glossaries()]
        with pytest.raises(deepl.GlossaryNotFoundException):
            other.get_glossary(glossary.glossary_id)
        with pytest.raises(deepl.GlossaryNotFoundException):
            other.get_glossary_entries(glossary.glossary_id)
        with pytest.raises(deepl.GlossaryNotFoundException):
            other.delete_glossary(glossary.glossary_id)
        with pytest.raises(deepl.DeepLException) as raised:
            other.translate_text("seven", source_lang="EN", target_lang="FR", glossary=glossary.glossary_id)
        assert raised.value.http_status_code == 404
        assert client.get_glossary_entries(glossary) == FRENCH  # untouched
    finally:
        other.delete_glossary(theirs)


def test_a_weblate_like_sync(served):
    """Weblate's DeepL backend: pairs, the glossaries by name, create one per project with TSV, and at the limit
    delete the oldest by creation_time first; its translate request (placeholders as <x>, one string a text) gets
    the terms in place of the model's words, a one-word string included."""
    http = httpx.Client(base_url=served.url, headers={"Authorization": f"DeepL-Auth-Key {WEBLATE_KEY}"})
    pairs = http.get("/v2/glossary-language-pairs").json()["supported_languages"]
    assert {"source_lang": "en", "target_lang": "de"} in pairs
    made = []
    for project in ("p0", "p1", "p2", "p3"):
        listed = http.get("/v2/glossaries").json()["glossaries"]
        by_name = {g["name"]: g["glossary_id"] for g in listed}
        assert project not in by_name
        if len(listed) >= 3:
            oldest = min(listed, key=lambda g: datetime.fromisoformat(g["creation_time"]))
            assert http.delete(f"/v2/glossaries/{oldest['glossary_id']}").status_code == 204
        r = http.post("/v2/glossaries", json={"name": project, "source_lang": "en", "target_lang": "de",
                                              "entries": "seven\tacht\ntwelve\tdreizehn", "entries_format": "tsv"})
        assert r.status_code == 201, r.text
        made.append(r.json()["glossary_id"])
    assert [g["name"] for g in http.get("/v2/glossaries").json()["glossaries"]] == ["p1", "p2", "p3"]
    r = http.post("/v2/translate", json={"text": ['<x id="0"></x> seven', "twelve"], "source_lang": "en",
                                         "target_lang": "de", "formality": "default", "tag_handling": "xml",
                                         "ignore_tags": ["x"], "glossary_id": made[-1]})
    assert r.status_code == 200, r.text
    tagged, one_word = (t["text"] for t in r.json()["translations"])
    assert "acht" in tagged and "sieben" not in tagged and one_word == "dreizehn"
    for glossary_id in made[1:]:
        http.delete(f"/v2/glossaries/{glossary_id}")


def test_glossaries_survive_a_restart(served):
    client = deepl.DeepLClient(KEY, server_url=served.url)
    kept = client.create_glossary("kept", "EN", "IT", {"seven": "otto"})
    served.restart()
    client = deepl.DeepLClient(KEY, server_url=served.url)
    assert client.get_glossary(kept.glossary_id).creation_time == kept.creation_time
    assert client.get_glossary_entries(kept) == {"seven": "otto"}
    with pytest.raises(deepl.GlossaryNotFoundException):
        deepl.DeepLClient(OTHER_KEY, server_url=served.url).get_glossary(kept.glossary_id)
    client.delete_glossary(kept)
