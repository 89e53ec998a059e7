"""The web page at `/`: the files of server/api/ui, read once when the app is made and served from memory, so a
page request never reaches a model. index.html names its assets under a path versioned by their content
(`ui/<version>/app.js`): browsers keep those for a year and revalidate only index.html, by its ETag."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException

FOLDER = Path(__file__).with_name("ui")
MEDIA_TYPES = {".html": "text/html; charset=utf-8", ".css": "text/css; charset=utf-8",
               ".js": "text/javascript; charset=utf-8", ".svg": "image/svg+xml"}
VERSION_MARK = b"{{version}}"  # where index.html names its assets' folder
FOREVER = "public, max-age=31536000, immutable"  # a versioned asset never changes under its path


@dataclass(frozen=True)
class File:
    body: bytes
    media_type: str
    etag: str

    @classmethod
    def of(cls, body: bytes, suffix: str) -> "File":
        return cls(body, MEDIA_TYPES[suffix], '"' + hashlib.sha256(body).hexdigest()[:16] + '"')

    def response(self, request: Request, cache_control: str) -> Response:
        headers = {"ETag": self.etag, "Cache-Control": cache_control}
        if self.etag in request.headers.get("if-none-match", ""):
            return Response(status_code=304, headers=headers)
        return Response(self.body, media_type=self.media_type, headers=headers)


class Page:
    """index.html and its assets; `version` is a hash of them all, so any change makes new asset paths."""

    def __init__(self, folder: Path = FOLDER):
        bodies = {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.suffix in MEDIA_TYPES}
        digest = hashlib.sha256()
        for name, body in bodies.items():
            digest.update(name.encode() + b"\0" + body + b"\0")
        self.version = digest.hexdigest()[:12]
        self.index = File.of(bodies.pop("index.html").replace(VERSION_MARK, self.version.encode()), ".html")
        self.assets = {name: File.of(body, Path(name).suffix) for name, body in bodies.items()}

    async def serve_index(self, request: Request) -> Response:
        return self.index.response(request, "no-cache")  # revalidated each time: it names the current assets

    async def serve_asset(self, request: Request, version: str, name: str) -> Response:
        asset = self.assets.get(name)
        if version != self.version or asset is None:
            raise StarletteHTTPException(404)
        return asset.response(request, FOREVER)


def router() -> APIRouter:
    page, routes = Page(), APIRouter(include_in_schema=False)
    for path, endpoint in (("/", page.serve_index), ("/ui/{version}/{name}", page.serve_asset)):
        routes.add_api_route(path, endpoint, methods=["GET", "HEAD"])
    return routes
