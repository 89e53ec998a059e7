"""Document jobs through DeepL's document routes (in process, the demo model): a job's states, its file translated as
each text alone, billed characters, one download then gone; another caller's or key's 404; a result before it is
done 503; files refused at upload (format, audio: the native API's alone, output_format, job limits), audio without a
speech model; a job's chunks and measured progress; a glossary kept in every chunk, or refused as /v2/translate
refuses it; a job whose process died taken over, or ended as an error once tried too often."""

import time
from dataclasses import replace

import pytest
from audio_files import audio_bytes, sine
from hostile_files import docx_bytes
from server_process import eventually, in_process_client

from model import demo_model_dir, text_content
from server.api.deepl import GLOSSARY_NEEDS_SOURCE
from server.document_store import DocumentStore
from server.settings import Settings

SETTINGS = Settings(dtype="float32", max_batch_rows=16, max_body_bytes=200_000, max_request_chars=2_000,
                    max_request_units=20, max_job_chars=6_000, job_chunk_chars=100, api_keys=("key-a", "key-b"))
A = {"Authorization": "DeepL-Auth-Key key-a"}
B = {"Authorization": "DeepL-Auth-Key key-b"}


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    folder = tmp_path_factory.mktemp("store")
    settings = replace(SETTINGS, key_store=str(folder / "keys.sqlite"))
    with in_process_client(settings, [str(demo_model_dir())]) as c:  # the text demo alone: no speech model
        yield c


def upload(client, name: str, data: bytes, headers=A, **form):
    return client.post("/v2/document", files={"file": (name, data)}, data={"target_lang": "DE", **form},
                       headers=headers)


def status(client, handle: dict, headers=A):
    return client.post(f"/v2/document/{handle['document_id']}", json={"document_key": handle["document_key"]},
                       headers=headers)


def result(client, handle: dict, headers=A):
    return client.post(f"/v2/document/{handle['document_id']}/result",
                       json={"document_key": handle["document_key"]}, headers=headers)


def finished(client, handle: dict) -> dict:
    return eventually(lambda: (s := status(client, handle).json())["status"] in ("done", "error") and s, 60)


def test_a_txt_job_queued_translated_fetched_once(client, alone):
    text = "forty-two.\n\nseven hundred."
    response = upload(client, "notes.txt", text.encode())
    assert response.status_code == 200, response.text
    handle = response.json()
    assert set(handle) == {"document_id", "document_key"}
    done = finished(client, handle)
    billed = len("forty-two.") + len("seven hundred.")  # the paragraphs, not the blank line between them
    assert done == {"document_id": handle["document_id"], "status": "done", "billed_characters": billed}
    fetched = result(client, handle)
    assert fetched.status_code == 200
    assert fetched.text == f"{alone('forty-two.')}\n\n{alone('seven hundred.')}"
    assert "notes.txt" in fetched.headers["content-disposition"]
    assert result(client, handle).status_code == 404  # deleted once downloaded
    assert status(client, handle).status_code == 404


def test_a_docx_job_keeps_paragraphs(client, alone):
    import io

    import docx

    handle = upload(client, "a.docx", docx_bytes("forty-two", "seven")).json()
    assert finished(client, handle)["status"] == "done"
    out = docx.Document(io.BytesIO(result(client, handle).content))
    assert [p.text for p in out.paragraphs] == [alone("forty-two"), alone("seven")]


@pytest.mark.slow
def test_a_long_html_page_goes_in_parts(client, alone):
    """A page longer than a request may be (max_request_chars 2,000), cut before its block elements."""
    numbers = ["forty-two", "seven", "nine", "eleven"] * 60
    page = "<html><body>" + "".join(f"<p>{n} <b>{n}</b>.</p>\n" for n in numbers) + "</body></html>"
    assert len(page) > SETTINGS.max_request_chars
    handle = upload(client, "long.html", page.encode()).json()
    assert finished(client, handle)["status"] == "done"
    translated = result(client, handle).text
    assert translated.startswith("<html><body><p>") and translated.count("<b>") == len(numbers)
    assert translated.count("</p>\n") == len(numbers) and translated.endswith("</body></html>")
    each = {n: alone(f"{n} {n}.") for n in set(numbers)}  # each sentence as it translates alone, tags aside
    assert [text_content(p, "html") for p in translated.split("</p>\n")[:-1]] == [each[n] for n in numbers]


def test_a_job_is_its_callers_and_its_keys(client):
    handle = upload(client, "a.txt", b"nine").json()
    assert status(client, handle, headers=B).status_code == 404
    assert status(client, {**handle, "document_key": "0" * 64}).json() == {"message": "Document not found"}
    assert result(client, handle, headers=B).status_code == 404
    assert finished(client, handle)["status"] == "done"


def test_a_long_job_runs_in_chunks_and_its_result_waits(client, alone):
    lines = [f"{n} forty-two." for n in ("one", "two", "three", "four", "five", "six", "seven", "eight")] * 8
    handle = upload(client, "long.txt", "\n\n".join(lines).encode()).json()
    early = result(client, handle)
    assert (early.status_code, early.json()) == (503, {"message": "Document translation is not done"})
    seen = set()
    eventually(lambda: seen.add(status(client, handle).json()["status"]) or "done" in seen, 60)
    assert "translating" in seen
    assert result(client, handle).text == "\n\n".join(alone(line) for line in lines)


def test_a_job_that_fails_says_why(client):
    handle = upload(client, "short.txt", b"seven. " * 30).json()  # 30 sentences in one paragraph: found as it runs
    failed = finished(client, handle)
    assert failed["status"] == "error"
    assert failed["error_message"] == "the request has 30 sentences to translate; at most 20"
    assert "seconds_remaining" not in failed and "billed_characters" not in failed
    fetched = result(client, handle)
    assert fetched.status_code == 404 and "Document translation failed" in fetched.json()["message"]


def test_chunks_hold_consecutive_texts_within_the_limit():
    from server.front.dispatch import chunks

    assert chunks(["ab", "cd", "efgh", "i", ""], 4) == [range(0, 2), range(2, 3), range(3, 5)]
    assert chunks(["abcdef", "g"], 4) == [range(0, 1), range(1, 2)]  # a longer text alone
    assert chunks([], 4) == []


@pytest.mark.parametrize("name, data, form, message", [
    ("a.pages", b"x", {}, "Value for 'file' not supported: the file type of 'a.pages'"),
    ("a.wav", audio_bytes(sine(1.0, 16_000), 16_000), {}, "Value for 'file' not supported: the file type of 'a.wav"),
    ("a.docx", b"not a zip", {}, "not a valid .docx file"),
    ("a.txt", b"seven", {"output_format": "pdf"}, "output_format 'pdf' is not available for a .txt document"),
    ("a.txt", "seven. " * 1000, {}, "Request too large: 7000 characters; at most 6000"),
    ("a.txt", b"seven", {"target_lang": "JA"}, "Value for 'target_lang' not supported."),
])
def test_files_refused_at_upload(client, name, data, form, message):
    response = upload(client, name, data.encode() if isinstance(data, str) else data, **form)
    assert response.status_code in (400, 413), response.text
    assert message in response.json()["message"]


@pytest.fixture
def glossary(client):
    """key-a's EN→DE glossary, made through DeepL's API: a term the model alone never says (it says zweiundvierzig)."""
    r = client.post("/v2/glossaries", json={"name": "numbers", "source_lang": "EN", "target_lang": "DE",
                                            "entries": "forty-two\tdreiundvierzig", "entries_format": "tsv"},
                    headers=A)
    assert r.status_code == 201, r.text
    yield r.json()["glossary_id"]
    client.delete(f"/v2/glossaries/{r.json()['glossary_id']}", headers=A)


def test_a_glossary_is_kept_in_every_chunk_of_a_job(client, glossary, jobs):
    lines = [f"{n} forty-two." for n in ("one", "two", "three", "four", "five", "six", "seven", "eight")]
    handle = upload(client, "long.txt", "\n\n".join(lines).encode(), source_lang="EN", glossary_id=glossary).json()
    assert finished(client, handle)["status"] == "done"
    translated = result(client, handle).text.split("\n\n")
    assert len(translated) == len(lines) and all("dreiundvierzig" in line for line in translated), translated
    assert len(jobs) > 1 and {job.glossary for job in jobs} == {(("forty-two", "dreiundvierzig"),)}
    bearer = {"Authorization": "Bearer key-a"}
    for form in ({"glossary_id": glossary}, {"glossary": '{"seven": "acht"}'}):  # the native API's jobs too
        submitted = client.post("/v1/documents", files={"file": ("a.txt", b"forty-two")},
                                data={"source_lang": "en", "target_lang": "de", **form}, headers=bearer)
        assert submitted.status_code == 202, submitted.text
        assert finished(client, submitted.json())["status"] == "done"  # polled through DeepL's routes: one job
    assert [job.glossary for job in jobs[-2:]] == [(("forty-two", "dreiundvierzig"),), (("seven", "acht"),)]


@pytest.mark.parametrize("form, headers, status, message", [
    ({}, A, 400, GLOSSARY_NEEDS_SOURCE),
    ({"source_lang": "EN", "glossary_id": "00000000-0000-0000-0000-000000000000"}, A, 404, "Glossary not found"),
    ({"source_lang": "EN"}, B, 404, "Glossary not found"),  # key-a's glossary, asked for by key-b
    ({"source_lang": "EN", "target_lang": "FR"}, A, 400, "The glossary has no dictionary from en to fr"),
])
def test_a_document_glossary_is_refused_as_a_texts_is(client, glossary, form, headers, status, message):
    form = {"glossary_id": glossary, **form}
    document = upload(client, "a.txt", b"seven", headers=headers, **form)
    text = client.post("/v2/translate", data={"text": "seven", "target_lang": "DE", **form}, headers=headers)
    assert (document.status_code, document.json()) == (text.status_code, text.json())
    assert document.status_code == status and message in document.json()["message"]


def test_no_file_and_no_key(client):
    assert upload(client, "a.txt", b"seven", headers={}).status_code == 403
    response = client.post("/v2/document", data={"target_lang": "DE"}, headers=A)
    assert (response.status_code, response.json()) == (400, {"message": "Parameter 'file' not specified."})


def test_the_native_api_runs_the_same_jobs(client, alone):
    bearer = {"Authorization": "Bearer key-a"}
    submitted = client.post("/v1/documents", files={"file": ("a.srt", b"1\n00:00:01,000 --> 00:00:02,000\nseven\n")},
                            data={"target_lang": "de"}, headers=bearer)
    assert submitted.status_code == 202, submitted.text
    handle = submitted.json()
    assert handle["status"] == "queued"
    path = f"/v1/documents/{handle['document_id']}"
    keyed = {**bearer, "X-Document-Key": handle["document_key"]}
    progress = eventually(lambda: (s := client.get(path, headers=keyed).json())["status"] == "done" and s, 60)
    assert progress["progress"] == 1.0 and progress["filename"] == "a.srt"
    assert status(client, handle).json()["status"] == "done"  # the same job, through DeepL's routes
    assert client.get(path, headers={**keyed, "X-Document-Key": "0"}).json()["error"]["code"] == "not_found"
    fetched = client.get(path + "/result", headers=keyed)
    assert "a.translated.srt" in fetched.headers["content-disposition"]
    assert fetched.text == f"1\n00:00:01,000 --> 00:00:02,000\n{alone('seven')}\n"
    assert client.get(path + "/result", headers=keyed).status_code == 404


def test_audio_on_a_server_without_a_speech_model_is_refused_at_upload(client):
    response = client.post("/v1/documents", files={"file": ("a.wav", audio_bytes(sine(1.0, 16_000), 16_000))},
                           data={"target_lang": "de"}, headers={"Authorization": "Bearer key-a"})
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["field"] == "model" and error["message"].startswith("no speech model is served")


@pytest.mark.parametrize("form, field", [({"target_lang": "ja"}, "target_lang"), ({}, "target_lang"),
                                         ({"target_lang": "de", "source_lang": "xx"}, "source_lang"),
                                         ({"target_lang": "de", "glossary_id": "g"}, "source_lang")])
def test_the_native_api_refuses_languages_not_served(client, form, field):
    response = client.post("/v1/documents", files={"file": ("a.txt", b"seven")}, data=form,
                           headers={"Authorization": "Bearer key-a"})
    assert response.status_code == 422 and response.json()["error"]["field"] == field


def test_seconds_remaining_from_measured_progress():
    from server.document_store import Job

    job = Job(*(["id", "owner", "a.txt", ".txt", ".txt", None, "de", None, (), "translating", 1000, 250, 1, None, 0.0,
                 100.0, None, None]))
    assert job.seconds_remaining(110.0) == 30  # 250 characters in 10 s: 750 more in 30 s
    assert Job(**{**job.__dict__, "characters_done": 0}).seconds_remaining(110.0) is None


def test_a_job_whose_process_died_is_taken_over_then_ends_as_an_error(tmp_path):
    now = [1000.0]
    store = DocumentStore(tmp_path, clock=lambda: now[0])
    job_id, key = store.submit("me", "a.txt", ".txt", ".txt", None, "de", None, (), 5, b"seven")
    assert store.claim(stale_s=30, attempts=2).id == job_id
    assert store.claim(stale_s=30, attempts=2) is None  # running, its heartbeat fresh
    now[0] += 31
    again = store.claim(stale_s=30, attempts=2)
    assert (again.id, again.attempts) == (job_id, 2)
    now[0] += 31
    assert store.claim(stale_s=30, attempts=2) is None
    failed = store.find(job_id, key, "me")
    assert failed.status == "error" and "stopped 2 times" in failed.error_message
    assert not store.path(job_id, "in").exists() or failed.status == "error"


def test_finished_jobs_expire(tmp_path):
    now = [time.time()]
    store = DocumentStore(tmp_path, clock=lambda: now[0])
    job_id, key = store.submit("me", "a.txt", ".txt", ".txt", None, "de", None, (), 5, b"seven")
    store.claim(30, 2)
    store.finish(job_id, b"sieben")
    now[0] += 100
    assert store.expire(ttl_s=60) == 1
    assert store.find(job_id, key, "me") is None and not list(tmp_path.glob(f"{job_id}.*"))


def test_a_server_shutting_down_queues_its_job_again(tmp_path):
    """A runner stopped mid-job (the app's shutdown) leaves it queued, its attempt not counted, for the next
    process to take at once."""
    import asyncio

    from server.front.access import Keys
    from server.front.document_jobs import DocumentJobs
    from server.key_store import KeyStore

    class Stuck:  # a model that never finishes translating
        async def translate(self, job):
            await asyncio.Event().wait()

    class Provider:
        settings = Settings(dtype="float32")

        async def get(self, model, source_lang, target_lang):
            return Stuck()

    async def scenario():
        store = DocumentStore(tmp_path / "documents")
        jobs = DocumentJobs(store, Provider(), Keys(Provider.settings, KeyStore(tmp_path / "k.sqlite")),
                            Provider.settings)
        jobs.start()
        job_id, key = await jobs.submit("me", b"seven", "a.txt", None, "de")
        for _ in range(100):
            if store.find(job_id, key, "me").status == "translating":
                break
            await asyncio.sleep(0.02)
        assert store.find(job_id, key, "me").status == "translating"
        await jobs.stop()
        return store.find(job_id, key, "me")

    job = asyncio.run(scenario())
    assert (job.status, job.attempts) == ("queued", 0)
