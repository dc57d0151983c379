"""Errors the services raise; the API maps them to HTTP statuses, the CLI to messages."""

from __future__ import annotations

from rlark.findings import Finding


class ServiceError(Exception):
    status = 400
    code = "BadRequest"

    def __init__(self, message: str, findings: list[Finding] | None = None):
        super().__init__(message)
        self.message = message
        self.findings = findings or []

    def to_dict(self) -> dict:
        body = {"code": self.code, "message": self.message}
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
