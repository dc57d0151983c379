"""What every router needs, attached to the app at start-up."""

from __future__ import annotations

from fastapi import Request

from rlark.services.jobs import JobService


def job_service(request: Request) -> JobService:
    return request.app.state.jobs
