"""The HTTP layer: the FastAPI app and one router module per API (native, LibreTranslate, DeepL, OpenAI), their schemas,
parameter reading, error rendering and keys. The only importer of FastAPI, Starlette and pydantic."""

from .app import create_app, render

__all__ = ["create_app", "render"]
