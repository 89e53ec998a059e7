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
