"""HTTP client for the CLI: one place that turns transport and API errors into messages."""

from __future__ import annotations

from typing import Any, Iterator

import httpx

from rlark import settings


class ClientError(Exception):
    """A message fit for a terminal, plus the API's findings when there are any."""

    def __init__(self, message: str, findings: list[dict] | None = None, status: int | None = None):
        super().__init__(message)
        self.message = message
        self.findings = findings or []
        self.status = status


class Client:
    def __init__(self, server: str | None = None, timeout: float = 30.0):
        self.base = settings.server_url(server)
        self.http = httpx.Client(base_url=self.base, timeout=timeout)

    def _request(self, method: str, path: str, **kw) -> httpx.Response:
        try:
            resp = self.http.request(method, path, **kw)
        except httpx.ConnectError:
            raise ClientError(
                f"no RLark server answers at {self.base}. Start one with `rlark server` "
                "(in another terminal), or point --server / RLARK_SERVER at a running one."
            ) from None
        except httpx.TimeoutException:
            raise ClientError(f"the RLark server at {self.base} did not answer in time") from None
        if resp.status_code >= 400:
            try:
                detail = resp.json().get("detail", {})
            except ValueError:
                detail = {"message": resp.text[:500]}
            if isinstance(detail, str):
                detail = {"message": detail}
            raise ClientError(
                detail.get("message") or f"HTTP {resp.status_code}",
                detail.get("findings"),
                resp.status_code,
            )
        return resp

    def get(self, path: str, **params) -> Any:
        params = {k: v for k, v in params.items() if v is not None}
        return self._request("GET", path, params=params).json()

    def get_text(self, path: str, **params) -> str:
        params = {k: v for k, v in params.items() if v is not None}
        return self._request("GET", path, params=params).text

    def post(self, path: str, content: bytes | None = None, content_type: str = "application/yaml") -> Any:
        headers = {"Content-Type": content_type} if content is not None else {}
        return self._request("POST", path, content=content, headers=headers).json()

    def put(self, path: str, content: bytes, content_type: str = "application/yaml") -> Any:
        return self._request("PUT", path, content=content, headers={"Content-Type": content_type}).json()

    def delete(self, path: str) -> Any:
        return self._request("DELETE", path).json()

    def stream_events(self, path: str, **params) -> Iterator[tuple[str, str]]:
        """Server-Sent Events as ``(event, data)`` pairs."""
        params = {k: v for k, v in params.items() if v is not None}
        try:
            with self.http.stream("GET", path, params=params, timeout=None) as resp:
                if resp.status_code >= 400:
                    resp.read()
                    try:
                        detail = resp.json().get("detail", {})
                    except ValueError:
                        detail = {"message": resp.text}
                    raise ClientError(detail.get("message", f"HTTP {resp.status_code}"),
                                      status=resp.status_code)
                event, data = "message", []
                for line in resp.iter_lines():
                    if line.startswith(":"):
                        continue
                    if not line:
                        if data:
                            yield event, "\n".join(data)
                        event, data = "message", []
                    elif line.startswith("event:"):
                        event = line[6:].strip()
                    elif line.startswith("data:"):
                        data.append(line[5:].lstrip())
        except httpx.ConnectError:
            raise ClientError(f"no RLark server answers at {self.base}; start one with `rlark server`") from None
