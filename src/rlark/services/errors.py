"""Errors the services raise; the API maps them to HTTP statuses, the CLI to messages."""

from __future__ import annotations

from typing import Any

from rlark.findings import Finding


class ServiceError(Exception):
    status = 400
    code = "BadRequest"

    def __init__(self, message: str, findings: list[Finding] | None = None):
        super().__init__(message)
        self.message = message
        self.findings = findings or []

    def to_dict(self) -> dict:
        body: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.findings:
            body["findings"] = [f.model_dump(mode="json") for f in self.findings]
        return body


class NotFound(ServiceError):
    status = 404
    code = "NotFound"


class Conflict(ServiceError):
    status = 409
    code = "Conflict"


class Invalid(ServiceError):
    status = 422
    code = "Invalid"


class TooLarge(ServiceError):
    status = 413
    code = "TooLarge"


class Unauthenticated(ServiceError):
    """No valid credentials: no token or session, or one that is unknown, revoked or expired."""

    status = 401
    code = "Unauthenticated"


class Forbidden(ServiceError):
    """Known user, not allowed: their role (or lack of one) does not permit the action."""

    status = 403
    code = "Forbidden"


class TooManyRequests(ServiceError):
    """A rate limit was reached; ``retry_after`` is in seconds."""

    status = 429
    code = "TooManyRequests"

    def __init__(self, message: str, retry_after: int):
        super().__init__(message)
        self.retry_after = retry_after


class QuotaExceeded(ServiceError):
    """A project's quota would be passed (as Kubernetes answers a ResourceQuota: 403). ``quota``:
    ``{"project", "name", "limit", "used", "requested"}``; the message says how to get room."""

    status = 403
    code = "QuotaExceeded"

    def __init__(self, message: str, quota: dict):
        super().__init__(message)
        self.quota = quota

    def to_dict(self) -> dict:
        return {**super().to_dict(), "quota": self.quota}


class StoreUnavailable(ServiceError):
    """The server's database does not answer (down, restarting, out of reach): a 503 with
    ``Retry-After``, never a 500. The message says nothing about where the database is (anyone
    may get it, before authentication); the server's log and ``GET /api/v1/server`` do."""

    status = 503
    code = "StoreUnreachable"

    def __init__(self, retry_after: int):
        super().__init__(f"the server's database is unreachable; retry in {retry_after} s (the "
                         "server's log says why)")
        self.retry_after = retry_after
