"""One typed settings object: CLI flags override environment variables (SERVER_*), which override defaults."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field, fields
from pathlib import Path


@dataclass(frozen=True)
class Settings:
    model: str | None = None  # checkpoint directory; None = the embedded demo model
    device: str = "auto"  # auto = cuda when available
    dtype: str = "auto"  # auto = float16 on cuda; on the cpu bfloat16 where it has native bfloat16, else float32
    # float32, bfloat16 on cpu: a tied output projection gets copies (faster, more memory)
    pack_tied_output: bool = True
    cuda_graphs: bool = True  # on cuda: the decoder step at static shapes, captured as CUDA graphs at start-up
    traced: bool = True  # on the cpu: encoder passes and decoder steps run as TorchScript traces (model/kernels)
    host: str = "127.0.0.1"
    port: int = 8000
    workers: int = 1  # --no-ray: server processes on the port, each with its own copy of every model
    engine_process: bool = True  # on the CPU: each model's engine in a process of its own, beside HTTP
    replica_http: bool = False  # Ray Serve: each replica serves HTTP on host:port itself, no Serve proxy in front
    max_batch_rows: int = 64  # KV-cache rows: live sequences (a beam request holds num_beams rows)
    max_batch_tokens: int = 4096  # padded source tokens admitted in one encoder pass
    max_request_share: float = 0.5  # of the batch rows, one request (a document) may hold while others decode
    max_waiting_sequences: int = 256  # per model: sequences waiting for the batch before new requests get 503
    max_texts: int = 64  # texts in one translate request
    max_input_tokens: int = 256  # tokens per sequence (a sentence; longer ones are cut)
    max_document_chars: int = 100_000  # characters per text (a document cut into sentences); more is refused
    max_generate_chars: int = 20_000  # characters in one /v1/generate text, before tokenizing
    max_new_tokens: int = 256  # upper limit a request may ask for
    max_beams: int = 16
    max_body_bytes: int = 1_000_000
    max_audio_bytes: int = 25 * 1024 * 1024  # one audio file (OpenAI's limit); the audio routes' body limit
    max_audio_seconds: float = 600.0  # one audio file's duration, from its header, then as decoded
    request_timeout_s: float = 60.0
    ready_stale_s: float = 5.0  # /readyz fails when the engine loop made no progress for this long
    health_stale_s: float = 30.0  # /healthz fails when the engine loop is dead or stuck this long
    drain_timeout_s: float = 30.0  # on SIGTERM: stop accepting, let in-flight requests finish this long
    api_keys: tuple[str, ...] = field(default=(), repr=False)
    key_store: str = "keys.sqlite"  # SQLite: keys, their limits and usage, glossaries; relative: to the working dir
    rate_limit_per_minute: int = 0  # work requests per API key (per client address without keys); 0 = none
    character_quota: int = 0  # characters translated per API key (per address without keys); 0 = none
    max_request_chars: int = 50_000  # characters in one LibreTranslate / DeepL request (LibreTranslate's charLimit)
    max_request_units: int = 2_000  # sentences (and pieces of over-long ones) one request translates; more is refused
    max_word_pieces: int = 8  # pieces one word without spaces may be cut into to fit max_input_tokens; more is refused
    max_file_expanded_bytes: int = 4_000_000  # uncompressed bytes of a packaged file's zip entries (read before
    # inflating), of a PDF's streams each
    max_file_ratio: int = 100  # how many times its compressed size one zip entry of a packaged file may inflate
    max_downloads: int = 32  # translated files kept for LibreTranslate's /download_file (oldest dropped)
    download_ttl_s: float = 600.0  # how long a translated file stays there
    max_glossaries: int = 1_000  # glossaries per API key (in all on a server without keys): DeepL's limit
    max_glossary_bytes: int = 10 * 1024 * 1024  # UTF-8 bytes of a glossary's entries (TSV, all dictionaries)
    max_glossary_term_bytes: int = 1_024  # UTF-8 bytes of one glossary term: DeepL's limit
    document_dir: str = "documents"  # document jobs' files and their SQLite state; relative: beside the key store
    max_job_chars: int = 1_000_000  # characters of one document job's text (its chunks each within the request limits)
    job_chunk_chars: int = 2_000  # characters a document job translates per request to the engine (its progress step)
    job_ttl_s: float = 3600.0  # how long a finished document job waits to be downloaded
    job_stale_s: float = 30.0  # a translating job whose process gave no sign of life for this long is taken over
    job_attempts: int = 2  # times a job is started before a job whose process keeps dying ends as an error
    max_models_per_replica: int = 4  # Ray Serve: models one replica holds at once (least recently used evicted)
    ui: bool = True  # the web page at / (server/api/ui); --no-ui leaves / a 404

    def __post_init__(self):
        if self.workers < 1:
            raise ValueError(f"workers must be at least 1, got {self.workers}")
        for name in ("job_chunk_chars", "job_attempts", "job_stale_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be above 0, got {getattr(self, name)}")
        if not 0 < self.max_request_share <= 1:
            raise ValueError(f"max_request_share is a share of the batch rows: above 0, at most 1; got "
                             f"{self.max_request_share}")

    @property
    def documents_path(self) -> Path:
        return Path(self.key_store).parent / self.document_dir

    @property
    def beam_limit(self) -> int:
        """Beams a request may use: a beam request must fit in the batch."""
        return min(self.max_beams, self.max_batch_rows)

    @classmethod
    def env_name(cls, name: str) -> str:
        return f"SERVER_{name.upper()}"

    @classmethod
    def from_env(cls, environ=os.environ, **overrides) -> "Settings":
        values = {}
        for f in fields(cls):
            raw = environ.get(cls.env_name(f.name))
            if raw is not None:
                try:
                    values[f.name] = _parse(f, raw)
                except ValueError as e:
                    raise ValueError(f"{cls.env_name(f.name)}: {e}") from None
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    @classmethod
    def coerce(cls, name: str, value):
        """A value from a config file or the command line, as the field's type."""
        field_ = next((f for f in fields(cls) if f.name == name), None)
        if field_ is None:
            raise ValueError(f"unknown setting {name!r}")
        return _parse(field_, value) if isinstance(value, str) else value

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        for f in fields(cls):
            if f.name in ("model", "api_keys", "replica_http"):  # python -m server: --serve-proxy
                continue
            flag = f.name.replace("_", "-")
            parser.add_argument("--" + flag, type=_type(f), default=None,
                                help=f"(env {cls.env_name(f.name)}; default {f.default})")
            if _type(f) is boolean:  # --no-ui reads better than --ui false; both work
                parser.add_argument("--no-" + flag, dest=f.name, action="store_const", const=False,
                                    help=f"the same as --{flag} false")


def boolean(raw: str) -> bool:
    value = raw.strip().lower()
    if value not in ("1", "true", "yes", "on", "0", "false", "no", "off"):
        raise ValueError(f"expected true or false (1/0, yes/no, on/off), got {raw!r}")
    return value in ("1", "true", "yes", "on")


def _type(f):
    return {"int": int, "float": float, "bool": boolean}.get(str(f.type).split(" ")[0], str)


def _parse(f, raw: str):
    if f.name == "api_keys":
        return tuple(k.strip() for k in raw.split(",") if k.strip())
    return _type(f)(raw)
