"""APIs other servers speak, answered by this one: LibreTranslate and DeepL v2, each a router with its own schemas,
authentication and error shape, all translating through server.dispatch like the native /v1 API."""

from .deepl import add_deepl_routes
from .libretranslate import add_libretranslate_routes

__all__ = ["add_deepl_routes", "add_libretranslate_routes"]
