"""HTTP client for the CLI: one place that turns transport and API errors into messages."""

from __future__ import annotations

from typing import Any, Iterator

import json
import os

import httpx

from rlark import settings
from rlark.cli import credentials


#: every Job belongs to a project; this one when nobody says which
DEFAULT_PROJECT = "default"


class ClientError(Exception):
    """A message fit for a terminal, plus the API's findings when there are any."""

    def __init__(self, message: str, findings: list[dict] | None = None, status: int | None = None,
                 server_message: str | None = None):
        super().__init__(message)
        self.message = message
        self.findings = findings or []
        self.status = status
        #: the server's own message, without the advice the client adds (e.g. on 401)
        self.server_message = server_message or message


def resolve_server(explicit: str | None = None) -> str:
    """The server the CLI talks to: ``--server``, else ``$RLARK_SERVER``, else the credentials
    file's current server (``rlark login``), else the local default."""
    if explicit or os.environ.get("RLARK_SERVER"):
        return settings.server_url(explicit)
    try:
        current = credentials.load().get("current")
    except credentials.CredentialsError:
        current = None
    return settings.server_url(current if isinstance(current, str) else None)


def resolve_token(server: str, explicit: str | None = None) -> str | None:
    """The API token for ``server``: ``--token``, else ``$RLARK_TOKEN``, else the credentials
    file's entry for that server.

    Raises:
        ClientError: the credentials file cannot be used (e.g. readable by others).
    """
    token = explicit or os.environ.get("RLARK_TOKEN")
    if token:
        return token.strip()
    item = _saved(server)
    return item.get("token") if item else None


def _saved(server: str) -> dict | None:
    """The credentials file's entry for ``server`` (None: none saved).

    Raises:
        ClientError: the credentials file cannot be used (e.g. readable by others).
    """
    try:
        return credentials.entry(server)
    except credentials.CredentialsError as exc:
        raise ClientError(str(exc)) from None


def token_source(explicit: str | None = None) -> str:
    """Where :func:`resolve_token` takes the token from, in words (for ``rlark whoami``)."""
    if explicit:
        return "--token"
    if os.environ.get("RLARK_TOKEN"):
        return "RLARK_TOKEN"
    return str(credentials.path())


def resolve_project(server: str, explicit: str | None = None) -> str:
    """The project Job commands act in: ``--project``, else ``$RLARK_PROJECT``, else the
    credentials file's project for ``server`` (``rlark project use``), else ``default``.

    Raises:
        ClientError: the credentials file cannot be used (e.g. readable by others).
    """
    project = explicit or os.environ.get("RLARK_PROJECT")
    if project:
        return project.strip()
    return (_saved(server) or {}).get("project") or DEFAULT_PROJECT



class Client:
    """The REST API with the caller's token (see :func:`resolve_token`).

    ``anonymous``: send no token at all (``rlark login --user``, whose password is the
    credential). ``project``: send ``?project=`` with every request (Job commands).

    Raises:
        ClientError: the credentials file cannot be used.
    """

    def __init__(self, server: str | None = None, timeout: float | httpx.Timeout = 30.0,
                 token: str | None = None, *, anonymous: bool = False, project: str | None = None):
        self.base = resolve_server(server)
        self.token = None if anonymous else resolve_token(self.base, token)
        self.project = project
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        self.http = httpx.Client(base_url=self.base, timeout=timeout, headers=headers,
                                 params={"project": project} if project else None)

    def _error(self, resp: httpx.Response) -> ClientError:
        """The API's answer ``resp`` (status >= 400) as a message fit for a terminal: the
        server's own message, and for 401 how to log in."""
        try:
            detail = resp.json().get("detail", {})
        except (ValueError, AttributeError):
            detail = {"message": resp.text[:500]}
        if isinstance(detail, str):
            detail = {"message": detail}
        elif not isinstance(detail, dict):  # a framework's list of validation errors
            detail = {"message": str(detail)[:500]}
        message = said = detail.get("message") or f"HTTP {resp.status_code}"
        retry = resp.headers.get("retry-after")
        if resp.status_code == 429 and retry and retry.isdigit():
            message = message.rstrip(".") + f"; try again in {retry} s"
        if resp.status_code == 401:
            message = message.rstrip(".") + (
                f". Log in with `rlark login --server {self.base}` (or set RLARK_TOKEN)"
                if not self.token else
                f". The token for {self.base} ({token_source()}) does not work: run "
                f"`rlark login --server {self.base}` again")
        return ClientError(message, detail.get("findings"), resp.status_code, said)

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
            raise self._error(resp)
        return resp

    def get(self, path: str, **params) -> Any:
        params = {k: v for k, v in params.items() if v is not None}
        return self._request("GET", path, params=params).json()

    def get_text(self, path: str, **params) -> str:
        params = {k: v for k, v in params.items() if v is not None}
        return self._request("GET", path, params=params).text

    def post(self, path: str, content: bytes | None = None, content_type: str = "application/yaml",
             params: dict[str, str] | None = None) -> Any:
        """POST ``path``; ``params``: its query (a query written into ``path`` would be replaced
        by the client's own ``?project=``: httpx sets a request's query from its params)."""
        headers = {"Content-Type": content_type} if content is not None else {}
        return self._request("POST", path, content=content, headers=headers,
                             **({"params": params} if params else {})).json()

    def put(self, path: str, content: bytes, content_type: str = "application/yaml") -> Any:
        return self._request("PUT", path, content=content, headers={"Content-Type": content_type}).json()

    def delete(self, path: str, **params) -> Any:
        params = {k: v for k, v in params.items() if v is not None}
        return self._request("DELETE", path, params=params).json()

    def send_json(self, method: str, path: str, body: Any) -> Any:
        """``method`` ``path`` with ``body`` as JSON; the answer's JSON."""
        return self._request(method, path, content=json.dumps(body).encode(),
                             headers={"Content-Type": "application/json"}).json()

    def download(self, url: str, sink: Any, **params) -> int:
        """GET ``url`` (with the query ``params``) and write its body to ``sink`` (a binary
        file) as it comes; the bytes written.

        Raises:
            ClientError: the server refused (its message), or did not answer.
        """
        params = {k: v for k, v in params.items() if v is not None}
        written = 0
        try:
            with self.http.stream("GET", url, params=params) as resp:
                if resp.status_code >= 400:
                    resp.read()
                    raise self._error(resp)
                for chunk in resp.iter_bytes():
                    sink.write(chunk)
                    written += len(chunk)
        except httpx.ConnectError:
            raise ClientError(f"no RLark server answers at {self.base}; start one with "
                              "`rlark server`") from None
        except httpx.TimeoutException:
            raise ClientError(f"the RLark server at {self.base} did not answer in time") from None
        return written

    def stream_events(self, path: str, **params) -> Iterator[tuple[str, str]]:
        """Server-Sent Events as ``(event, data)`` pairs."""
        params = {k: v for k, v in params.items() if v is not None}
        try:
            with self.http.stream("GET", path, params=params, timeout=None) as resp:
                if resp.status_code >= 400:
                    resp.read()
                    raise self._error(resp)
                event = "message"
                data: list[str] = []
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
        except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
            # the server closed the stream: it went away, or it dropped this client for reading
            # nothing for a while (RLARK_LOG_FOLLOW_SEND_TIMEOUT)
            raise ClientError(f"the server at {self.base} ended the stream ({exc}); run the "
                              "command again to carry on") from None
