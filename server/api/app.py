"""The FastAPI application: the APIs' routes over one provider of models, the middleware in front of them, and
which API's error shape answers a request."""

from __future__ import annotations

import logging
from importlib.metadata import PackageNotFoundError, version

from fastapi import APIRouter, FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..document_store import DocumentStore
from ..errors import BadBody, ServerError
from ..front import ModelProvider, dispatch
from ..front.access import Keys
from ..front.document_jobs import DocumentJobs
from ..front.downloads import Downloads
from ..front.glossaries import Glossaries
from ..glossary_store import GlossaryStore
from ..key_store import KeyStore
from ..settings import Settings
from ..stores import Store
from . import (deepl, deepl_documents, deepl_glossaries, libretranslate, native, native_audio, native_documents,
               native_glossaries, openai, openai_audio, page)
from .deps import AppState, served
from .errors import NATIVE, Names, names_of, route_path, validation_error
from .middleware import BodyGuard, RequestMetrics, ScopedCORS
from .resending import Resending

log = logging.getLogger(__name__)

DISTRIBUTION = "seq2seq-serve"  # pyproject.toml's name: its version there is the only one written
# the first that owns a path renders its errors
STYLES = (libretranslate.STYLE, deepl.STYLE, openai.STYLE, openai_audio.STYLE, NATIVE)
AUDIO_PATHS = openai_audio.PATHS | native_audio.PATHS | native_documents.PATHS
FORM_BYTES = 64 * 1024  # an audio form's fields and multipart framing, beside its file


def body_limit(settings: Settings, path: str) -> int:
    """A request's body limit: max_body_bytes, or on a route that takes audio its file and form fields where that is
    more (/v1/documents takes documents too: the front holds them to max_body_bytes)."""
    audio = settings.max_audio_bytes + FORM_BYTES if path in AUDIO_PATHS else 0
    return max(audio, settings.max_body_bytes)


def render(path: str, error: ServerError, names: Names = Names()) -> Response:
    """`error` in the shape of the API that owns `path`."""
    return next(style for style in STYLES if style.owns(path)).render(error, names)


def installed_version() -> str:
    """The version pyproject.toml gives, as installed; "unknown" when run from a checkout never installed."""
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return "unknown"


def create_app(provider: ModelProvider, settings: Settings, key_store: Store[KeyStore] | None = None,
               glossary_store: Store[GlossaryStore] | None = None,
               document_store: Store[DocumentStore] | None = None) -> FastAPI:
    """`key_store`, `glossary_store`: where the keys and their counts are, and the glossaries (default: the file
    settings.key_store names, for both); `document_store`: where the document jobs are (default: the folder
    settings.documents_path names)."""
    # FastAPI's own OpenTelemetry instrumentation off: the server reports through Prometheus (/metrics), and with
    # it on FastAPI asks OpenTelemetry for its providers on every request (loadtests/README.md, serving path).
    app = FastAPI(title=DISTRIBUTION, version=installed_version(),
                  description="Translation and text-to-text generation with encoder-decoder Transformers.",
                  telemetry={"tracing": False, "metrics": False, "logs": False})
    keys = Keys(settings, key_store or KeyStore(settings.key_store))
    glossaries = Glossaries(glossary_store or GlossaryStore(settings.key_store), settings, keys)
    jobs = DocumentJobs(document_store or DocumentStore(settings.documents_path), provider, keys, settings)
    app.state.served = AppState(provider, settings, keys, Downloads(settings.max_downloads, settings.download_ttl_s),
                                glossaries, jobs)
    app.add_middleware(BodyGuard, max_bytes=lambda path: body_limit(settings, path), render=render)
    app.add_middleware(RequestMetrics, paths=lambda: paths)
    app.add_middleware(ScopedCORS, owns=libretranslate.owns)  # outermost: its errors' answers get CORS too
    app.add_exception_handler(ServerError, server_error)
    app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(Exception, unexpected)
    included = routers(settings, keys.enforcing)
    for router in included:
        app.include_router(router)
    app.router.on_startup += [dispatch.load_detection, jobs.start]
    app.router.on_shutdown.append(jobs.stop)
    paths = {route.path for router in included for route in router.routes}  # app.routes holds the routers
    return app


def routers(settings: Settings, guarded: bool) -> list[APIRouter]:
    """Every API's routes, in the order they are matched; `guarded`: the native ones ask for the caller's key first
    (keys or limits configured)."""
    return [native.router(settings, guarded), native_glossaries.router(guarded), libretranslate.router, deepl.router,
            deepl_glossaries.router, deepl_documents.router, openai.router, openai_audio.router, OPERATIONS,
            *([page.router()] if settings.ui else [])]


def resending(settings: Settings) -> Resending:
    """Which of the app's requests may be sent again after a lost replica (api.resending), for runtime.replica_lost."""
    return Resending([route for router in routers(settings, guarded=False) for route in router.routes])


async def server_error(request: Request, exc: ServerError):
    # a native route's guard: /v1/models answers as OpenAI's
    return render(route_path(request.scope), exc, names_of(request))


async def invalid(_: Request, exc: RequestValidationError):
    return NATIVE.render(validation_error(exc))


async def http_error(request: Request, exc: StarletteHTTPException):
    # a body the framework could not parse, e.g. one json.loads cannot even decode (NUL bytes, read as UTF-32, are
    # no JSONDecodeError): in the error shape of the API the path belongs to
    if exc.status_code == 400 and request.method == "POST":
        return render(route_path(request.scope), BadBody("the body could not be parsed", field="body"))
    return await http_exception_handler(request, exc)  # 404, 405: FastAPI's own answer


async def unexpected(_: Request, exc: Exception):
    log.exception("unhandled error")
    return NATIVE.render(ServerError(f"internal error: {type(exc).__name__}"))


OPERATIONS = APIRouter()  # what orchestrators and scrapers ask: health, readiness, metrics


@OPERATIONS.get("/healthz")
async def healthz(request: Request):
    state = served(request)
    ok, detail = await state.provider.health(state.settings.health_stale_s)
    return JSONResponse({"status": "ok" if ok else "unhealthy", "detail": detail}, status_code=200 if ok else 503)


@OPERATIONS.get("/readyz")
async def readyz(request: Request):
    state = served(request)
    ok, detail = await state.provider.health(state.settings.ready_stale_s)
    return JSONResponse({"status": "ready" if ok else "not ready", "detail": detail}, status_code=200 if ok else 503)


@OPERATIONS.get("/metrics")
async def metrics(request: Request):
    return Response(served(request).provider.metrics_text(), media_type=CONTENT_TYPE_LATEST)
