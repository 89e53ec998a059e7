"""Domain errors raised where a problem is found: an HTTP status, a code, the field and the limit.

Pure Python (the scheduler raises them); each API renders them in its own error shape.
"""

from __future__ import annotations


class ServerError(Exception):
    status = 500
    code = "internal_error"
    retry_after_s: int | None = None  # sent as Retry-After when set

    def __init__(self, message: str, field: str | None = None, limit=None):
        super().__init__(message)
        self.message, self.field, self.limit = message, field, limit

    def body(self) -> dict:
        error = {"code": self.code, "message": self.message}
        if self.field is not None:
            error["field"] = self.field
        if self.limit is not None:
            error["limit"] = self.limit
        return {"error": error}

    def headers(self) -> dict[str, str]:
        return {} if self.retry_after_s is None else {"Retry-After": str(self.retry_after_s)}


class InvalidRequest(ServerError):
    status, code = 422, "invalid_request"


class BadBody(ServerError):
    status, code = 400, "bad_body"


class BodyTooLarge(ServerError):
    status, code = 413, "body_too_large"


class UnknownModel(ServerError):
    status, code = 404, "unknown_model"


class Unauthorized(ServerError):
    status, code = 401, "unauthorized"

    def headers(self) -> dict[str, str]:
        return {"WWW-Authenticate": "Bearer"}


class QueueFull(ServerError):
    status, code = 503, "queue_full"
    retry_after_s = 1


class RequestTimeout(ServerError):
    status, code = 504, "timeout"


class EngineFailed(ServerError):
    status, code = 503, "engine_failed"
    retry_after_s = 1


class ShuttingDown(ServerError):
    """The server process stopped before the request finished (its drain ran out): another process may take it."""

    status, code = 503, "shutting_down"
    retry_after_s = 1


# What the server serves, found by the front (front/served_languages.py, front/document_jobs.py, front/dispatch.py,
# front/glossaries.py). The message is the native API's; each compatible API words them in its own error table.

class LanguageNotServed(InvalidRequest):
    """A language (`side` "source" or "target", as sent: `code`, None when missing) no served model has on that
    side; `served`: the public codes served on it."""

    def __init__(self, side: str, code: str | None, served: list[str]):
        super().__init__(f"{side}_lang {code!r} is not served; served: {served}", field=f"{side}_lang")
        self.side, self.code, self.served, self.args = side, code, served, (side, code, served)


class UnsupportedFileType(BadBody):
    """A file whose suffix is none of the kinds read (model.SUFFIXES, and on the native API model.AUDIO_SUFFIXES)."""

    def __init__(self, filename: str, suffix: str, supported: tuple[str, ...]):
        super().__init__(f"unsupported file type {suffix or '(none)'!r}; supported: {', '.join(supported)}",
                         field="file")
        self.filename, self.suffix, self.supported = filename, suffix, supported
        self.args = (filename, suffix, supported)


class InvalidMarkup(BadBody):
    """A text sent as XML or HTML that the markup parser rejects (XML not well-formed, a DTD declared); `problem`
    says what and where."""

    def __init__(self, field: str, problem: str):
        super().__init__(f"{field}: {problem}", field=field)
        self.problem, self.args = problem, (field, problem)


class NotFollowed(InvalidRequest):
    """Guidance this server cannot follow (`kind`: "instructions", free-text instructions to the translator, or
    "style", a stored style-rule list): its models translate the text alone, so a request asking for it is refused
    rather than answered as if it had been followed."""

    def __init__(self, kind: str):
        super().__init__(f"{kind}: this server's models translate the text alone and do not follow {kind}")
        self.kind, self.args = kind, (kind,)


# A request over one of the server's limits, found by the front (front/dispatch.py checks each limit once; the
# model-dependent ones in front/service.py). They hold what was counted, never an API's field names: each API words
# them in its own error table. `args` are the constructor's, so they cross Ray and process pipes intact.

class TooManyTexts(InvalidRequest):
    """More sequences than max_texts: `count` texts, `choices` generated for each (OpenAI's n)."""

    def __init__(self, count: int, limit: int, choices: int = 1):
        super().__init__(f"{count} texts × {choices} choices; at most {limit}", limit=limit)
        self.count, self.choices, self.args = count, choices, (count, limit, choices)


class TooManyItems(InvalidRequest):
    """More texts than an API takes in one request (DeepL's 50, its own contract, below the server's max_texts)."""

    def __init__(self, count: int, limit: int):
        super().__init__(f"{count} texts; at most {limit}", limit=limit)
        self.count, self.args = count, (count, limit)


class TooManyCharacters(InvalidRequest):
    """A request's texts (or a file's) have more characters together than max_request_chars."""

    def __init__(self, count: int, limit: int):
        super().__init__(f"the request has {count} characters; at most {limit}", limit=limit)
        self.count, self.args = count, (count, limit)


class TextTooLong(InvalidRequest):
    """One text over max_document_chars (translation) or max_generate_chars (generation); `field` is the text's
    name as its job gives it (text[3], q, prompt[1]), and every API words it alike."""

    def __init__(self, field: str, count: int, limit: int):
        super().__init__(f"{field} has {count} characters; at most {limit}", field=field, limit=limit)
        self.count, self.args = count, (field, count, limit)


class TooManySentences(InvalidRequest):
    """A request cut into more units (sentences, pieces of over-long ones) than max_request_units."""

    def __init__(self, count: int, limit: int):
        super().__init__(f"the request has {count} sentences to translate; at most {limit}", limit=limit)
        self.count, self.args = count, (count, limit)


class TooManyBeams(InvalidRequest):
    """num_beams over the beam limit (max_beams, within the batch)."""

    def __init__(self, count: int, limit: int):
        super().__init__(f"num_beams {count} is above the limit {limit}", field="num_beams", limit=limit)
        self.count, self.args = count, (count, limit)


class TooManyRows(InvalidRequest):
    """A sentence whose decoding rows (its beams, and the constraint rows its glossary terms add) are more than the
    batch holds (max_batch_rows): the scheduler could never admit it."""

    def __init__(self, beams: int, count: int, limit: int):
        self.beams, self.count, self.limit = beams, count, limit
        super().__init__(self.worded("num_beams"), field="num_beams", limit=limit)
        self.args = (beams, count, limit)

    def worded(self, knob: str) -> str:
        """The message, the beams named as the request names them (`knob`)."""
        return (f"{knob} {self.beams} with the glossary's terms needs {self.count} decoding rows; the batch has "
                f"{self.limit} (max_batch_rows)")


class TooManyTokens(InvalidRequest):
    """A token knob (`knob`: max_new_tokens or min_new_tokens, DecodeOptions' names) over the model's
    max_new_tokens."""

    def __init__(self, knob: str, count: int, limit: int):
        super().__init__(f"{knob} {count} is above the limit {limit}", field=knob, limit=limit)
        self.knob, self.count, self.args = knob, count, (knob, count, limit)


class TooManySeconds(InvalidRequest):
    """Audio longer than max_audio_seconds: `seconds` as its header declares it, or (`at_least`) as far as it was
    decoded."""

    def __init__(self, seconds: float, limit: float, at_least: bool = False):
        super().__init__(f"the audio is {'at least ' if at_least else ''}{seconds:.1f} s long; at most {limit:g} s",
                         field="file", limit=limit)
        self.seconds, self.at_least, self.args = seconds, at_least, (seconds, limit, at_least)


class NotSpeechModel(InvalidRequest):
    """Audio sent to a model that does not take it (`name`; None: no model named and none served takes audio), or
    text to one that takes only audio; `speech` says which kind the request needed, `served` the models of that
    kind."""

    def __init__(self, name: str | None, speech: bool, served: list[str]):
        kind = "speech" if speech else "text"
        what = f"model {name!r} is not a {kind} model" if name else f"no {kind} model is served"
        super().__init__(f"{what}; {kind} models: {served}", field="model", limit=served)
        self.speech, self.args = speech, (name, speech, served)


class SamplingNeedsOneBeam(InvalidRequest):
    """Beams asked for where the request (or the model's default) samples."""

    def __init__(self):
        super().__init__("sampling (temperature, top_k, top_p, seed, or the model's default) needs 1 beam",
                         field="num_beams", limit=1)
        self.args = ()


# Glossaries (server/glossary_entries.py checks their entries, server/glossary_store.py their number per owner).

class GlossaryNotFound(ServerError):
    """No glossary (or dictionary) of this id for this caller: another key's glossary is answered the same."""

    status, code = 404, "glossary_not_found"

    def __init__(self, field: str = "glossary_id"):
        super().__init__("Glossary not found", field=field)
        self.args = (field,)


class GlossaryNeedsLanguage(InvalidRequest):
    """A stored glossary named without the language (`knob`: source_lang or target_lang) that picks its dictionary."""

    def __init__(self, knob: str):
        super().__init__(f"{knob}: required with glossary_id (a glossary has a dictionary per language pair)",
                         field=knob)
        self.knob, self.args = knob, (knob,)


class InvalidGlossary(InvalidRequest):
    """Glossary entries that cannot be used (an empty term, a control character, a duplicate source term, a line
    without a separator): the message says which entry."""

    def __init__(self, field: str, problem: str):
        super().__init__(f"{field}: {problem}", field=field)
        self.problem, self.args = problem, (field, problem)


class TermTooLong(InvalidRequest):
    """One glossary term over max_glossary_term_bytes (UTF-8)."""

    def __init__(self, field: str, term: str, count: int, limit: int):
        super().__init__(f"{field}: the term {term[:40]!r} has {count} bytes (UTF-8); at most {limit}", field=field,
                         limit=limit)
        self.count, self.args = count, (field, term, count, limit)


class GlossaryTooLarge(InvalidRequest):
    """A glossary's entries over max_glossary_bytes (UTF-8, as TSV, every dictionary together)."""

    def __init__(self, field: str, count: int, limit: int):
        super().__init__(f"{field}: the glossary has {count} bytes of entries; at most {limit}", field=field,
                         limit=limit)
        self.count, self.args = count, (field, count, limit)


class TooManyGlossaries(InvalidRequest):
    """An owner (an API key; everyone on a server without keys) at max_glossaries already."""

    def __init__(self, limit: int):
        super().__init__(f"the maximum number of glossaries ({limit}) has been reached: delete one first",
                         limit=limit)
        self.args = (limit,)
