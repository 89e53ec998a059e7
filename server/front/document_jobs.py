"""Document jobs, as every API's document routes use them: a file submitted (read and its limits checked at once, so a
broken or too large file is answered then), run in the background by whichever process of the machine claims it from
the store (server.document_store), polled, and fetched once.

A document (model.SUFFIXES) is translated in its own format. An audio file (model.AUDIO_SUFFIXES, the native API's
only: DeepL and LibreTranslate translate documents, not speech) becomes subtitles, .srt or .vtt: transcribed by the
first speech model served, its segments translated into target_lang (unless that is the spoken language) with their
timings kept, as /v1/transcribe makes them (front.speech.captions); its source_lang, when given, is the spoken
language (else the speech model detects it). It is charged the characters of its cues, counted once transcribed.

Each process runs one job at a time, its texts in consecutive requests of `job_chunk_chars` characters: each one
request of the scheduler's fair share, so a long document never holds more of the batch than one request may while
short requests come and go. A job is charged its characters when it starts (refunded if it fails). While it runs its
heartbeat is beaten every `job_stale_s / 3`, so a job whose process died is taken over by another after `job_stale_s`;
a process shutting down queues its job again for the next to take at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import asynccontextmanager
from pathlib import PurePath

from model import AUDIO_SUFFIXES, SUFFIXES, SpeechOptions, written_as

from ..document_store import DocumentStore, Job
from ..domain import SpeechJob
from ..errors import BodyTooLarge, InvalidRequest, ServerError, UnsupportedFileType
from ..glossary_entries import Entries
from ..settings import Settings
from ..stores import Store
from . import dispatch, speech
from .access import Keys
from .provider import ModelProvider
from .subtitles import SUBTITLE_FORMATS, subtitles

log = logging.getLogger(__name__)

POLL_S = 1.0  # how often an idle runner looks for jobs submitted through other processes (and expired ones)
FINISHED_POLL_S = 0.1  # how often a request waiting for its job looks at it
DOCUMENT_SUFFIXES = (*SUFFIXES, *AUDIO_SUFFIXES)  # what a job reads: documents, and audio made subtitles
SUBTITLE_SUFFIXES = tuple(f".{kind}" for kind in SUBTITLE_FORMATS)  # an audio's subtitles: .srt unless asked


def output_suffix(suffix: str, asked: str | None) -> str:
    """The suffix a file's translation is written in: a document's own (or model.written_as's), an audio's one of
    SUBTITLE_SUFFIXES; `asked` (output_format, with or without its dot) must name one of them, else InvalidRequest
    lists them."""
    choices = SUBTITLE_SUFFIXES if suffix in AUDIO_SUFFIXES else (written_as(suffix),)
    wanted = "." + asked.lower().lstrip(".") if asked else choices[0]
    if wanted not in choices:
        raise InvalidRequest(f"output_format {asked!r} is not available for a {suffix} document: it is written as "
                             f"{' or '.join(choices)}", field="output_format", limit=list(choices))
    return wanted


def check_file_type(filename: str, supported: tuple[str, ...] = SUFFIXES) -> str:
    """A file's kind, its suffix, one of `supported` (the compatible APIs': documents only): UnsupportedFileType
    otherwise."""
    suffix = PurePath(filename).suffix.lower()
    if suffix not in supported:
        raise UnsupportedFileType(filename, suffix, supported)
    return suffix


class DocumentNotFound(ServerError):
    status, code = 404, "not_found"


class DocumentNotReady(ServerError):
    status, code = 503, "not_ready"


class DocumentJobs:
    def __init__(self, store: Store[DocumentStore], provider: ModelProvider, keys: Keys, settings: Settings):
        self.store, self.provider, self.keys, self.settings = store, provider, keys, settings
        self.submitted = asyncio.Event()  # a job submitted here: no need to wait for the next poll
        self.task: asyncio.Task | None = None

    async def submit(self, owner: str, data: bytes, filename: str, source_lang: str | None, target_lang: str,
                     output_format: str | None = None, model: str | None = None,
                     glossary: Entries = ()) -> tuple[str, str]:
        """A queued job's (id, key); the file is read now, so a damaged one or one over the job limits is refused
        before anything is stored. `glossary`: the (source term, target term) pairs every chunk keeps."""
        suffix = check_file_type(filename, DOCUMENT_SUFFIXES)
        written = output_suffix(suffix, output_format)
        characters = await (self._check_audio(data) if suffix in AUDIO_SUFFIXES else self._check_document(data, suffix))
        handle = await self.store.run(DocumentStore.submit, owner, filename, suffix, written, source_lang,
                                      target_lang, model, glossary, characters, data)
        self.submitted.set()
        return handle

    async def _check_document(self, data: bytes, suffix: str) -> int:
        """A document's characters, read within the job limits. Held to max_body_bytes where its route's body limit
        is an audio file's."""
        if len(data) > self.settings.max_body_bytes:
            raise BodyTooLarge(f"the {suffix} file has {len(data)} bytes; at most {self.settings.max_body_bytes}",
                               field="file", limit=self.settings.max_body_bytes)
        parsed = await dispatch.read_document(self.provider, data, suffix)
        dispatch.check_job(self.provider, parsed)
        return parsed.characters

    async def _check_audio(self, data: bytes) -> int:
        """An audio file decoded within its limits, a speech model served (NotSpeechModel otherwise); 0 characters
        until its transcript counts them."""
        await self.provider.get(None, speech=True)
        await speech.read(self.provider, data)
        return 0

    async def owned(self, job_id: str, key: str, owner: str) -> Job:
        """The job with this id, key and owner; a 404 when any of them differs (one answer for all: a wrong key
        tells nothing about the id)."""
        job = await self.store.run(DocumentStore.find, job_id, key, owner)
        if job is None:
            raise DocumentNotFound("Document not found", field="document_id")
        return job

    async def download(self, job: Job) -> bytes:
        """A done job's translation, once: the job is deleted with it. A 503 before it is done, a 404 for a job that
        failed (its status says why) or one another request downloaded meanwhile."""
        if job.status == "error":
            raise DocumentNotFound(f"Document translation failed: {job.error_message}", field="document_id")
        if job.status != "done":
            raise DocumentNotReady("Document translation is not done", field="document_id")
        data = await self.store.run(DocumentStore.take, job)
        if data is None:
            raise DocumentNotFound("Document not found", field="document_id")
        return data

    async def finished(self, job_id: str, key: str, owner: str) -> Job:
        """The job once it is done or failed, whichever process runs it (for APIs that answer a file when it is
        translated, as LibreTranslate does; the client's hang-up cancels the wait)."""
        while (job := await self.owned(job_id, key, owner)).status not in ("done", "error"):
            await asyncio.sleep(FINISHED_POLL_S)
        return job

    def seconds_remaining(self, job: Job) -> int | None:
        return job.seconds_remaining(time.time())

    # ---- the runner -------------------------------------------------------------------------------------
    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._serve())

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)

    async def _serve(self) -> None:
        while True:
            try:  # a locked or full disk: the jobs wait (a claimed one is taken over), the runner lives on
                await self.store.run(DocumentStore.expire, self.settings.job_ttl_s)
                job = await self._claim()
                if job is not None:
                    await self._run(job)
                    continue
            except Exception:
                log.exception("document store")
            self.submitted.clear()
            try:
                async with asyncio.timeout(POLL_S):
                    await self.submitted.wait()
            except TimeoutError:
                pass

    async def _claim(self) -> Job | None:
        """The next job, now this process's. A claim's statement runs to its end in its thread: a shutdown meeting it
        queues what it took again."""
        claiming = asyncio.ensure_future(self.store.run(DocumentStore.claim, self.settings.job_stale_s,
                                                        self.settings.job_attempts))
        try:
            return await asyncio.shield(claiming)
        except asyncio.CancelledError:
            job = await claiming
            if job is not None:
                await self.store.run(DocumentStore.release, job.id)
            raise

    async def _run(self, job: Job) -> None:
        progress = Progress(self.store, job)
        beating = asyncio.get_running_loop().create_task(self._beat(progress))
        work = self._subtitles if job.suffix in AUDIO_SUFFIXES else self._translation
        try:
            data = await self.store.run(DocumentStore.upload, job.id)
            await self.store.run(DocumentStore.finish, job.id, await work(job, data, progress))
        except asyncio.CancelledError:
            await self.store.run(DocumentStore.release, job.id)
            raise
        except ServerError as e:
            await self.store.run(DocumentStore.fail, job.id, e.message)
        except Exception as e:
            log.exception("document job %s", job.id)
            await self.store.run(DocumentStore.fail, job.id, f"internal error: {type(e).__name__}")
        finally:
            beating.cancel()

    async def _translation(self, job: Job, data: bytes, progress: Progress) -> bytes:
        parsed = await dispatch.read_document(self.provider, data, job.suffix)
        return await dispatch.translate_file(
            self.provider, parsed, job.source_lang, job.target_lang, job.model,
            spending=self.keys.spending(job.owner, job.characters), chunk_chars=self.settings.job_chunk_chars,
            progress=progress.done, glossary=job.glossary)

    async def _subtitles(self, job: Job, data: bytes, progress: Progress) -> bytes:
        @asynccontextmanager
        async def charged(characters: int):
            await progress.count(characters)
            async with self.keys.spending(job.owner, characters):
                yield

        samples = await speech.read(self.provider, data)
        options = SpeechOptions.with_fallback(language=job.source_lang)  # as /v1/transcribe decodes
        shown = await speech.captions(self.provider, SpeechJob(samples, options), job.target_lang, charge=charged,
                                      translation_model=job.model, chunk_chars=self.settings.job_chunk_chars,
                                      progress=progress.done, glossary=job.glossary)
        return subtitles(shown.segments, job.output_suffix.lstrip(".")).encode("utf-8")

    async def _beat(self, progress: Progress) -> None:
        while True:
            await asyncio.sleep(self.settings.job_stale_s / 3)
            await progress.beat()


class Progress:
    """A running job's share done of its characters (an audio job's counted once transcribed), written to the store
    after each step and at each heartbeat."""

    def __init__(self, store: Store[DocumentStore], job: Job):
        self.store, self.job_id, self.characters, self.share = store, job.id, job.characters, 0.0

    async def count(self, characters: int) -> None:
        self.characters = characters
        await self.store.run(DocumentStore.count, self.job_id, characters)

    async def done(self, share: float) -> None:
        self.share = share
        await self.beat()

    async def beat(self) -> None:
        await self.store.run(DocumentStore.progress, self.job_id, round(self.share * self.characters))
