"""Pod logs followed from one asyncio loop: :class:`AsyncLogReader`, the streaming half of the
thin layer to the Kubernetes API server (:mod:`.client` has the rest, and makes readers with
``KubeClient.log_reader``). No decisions: when to open or reopen a stream is :mod:`.logplan`'s,
the loop and the files are :mod:`.logfollow`'s.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

import httpx

from rlark.runtimes.kubernetes.client import (CONNECT_TIMEOUT, RBAC_HINT, REQUEST_TIMEOUT, KubeError,
                                              RateLimit)

#: idle connections the log reader keeps for the next streams
KEEP_ALIVE = 256
#: seconds a log stream waits for a spare token (:meth:`RateLimit.take_spare`) before it queues
#: like any other request: long launches hold the bucket, but never keep a log unread for good
SPARE_WAIT_MAX = 30.0
#: tokens a log stream leaves in the bucket when it takes a spare one: the Pods of a launch,
#: which take spare tokens too (:meth:`RateLimit.wait_batch`), go first
STREAM_KEEP = 10.0

#: log streams one httpx client (one connection pool) of :class:`AsyncLogReader` carries at most:
#: httpcore looks at every connection of a pool to place each request (a socket check each), so
#: one pool carrying 1,000 followed logs spent a quarter of the server's CPU placing requests
#: while 1,000 Pods started (issue 23)
STREAMS_PER_CLIENT = 64


class AsyncLogReader:
    """Follows Pod logs from one asyncio loop (httpx): many streams, one thread.

    The official client is synchronous (each open stream would hold a thread), so log streams go
    through ``httpx.AsyncClient`` with the same server, CA, client certificate and bearer token
    as ``configuration`` (the ``kubernetes`` package's ``Configuration``; its token is asked
    for again at each open, so a rotated ServiceAccount token is used). The request is the one
    ``kubectl logs -f --timestamps`` makes: ``GET /api/v1/namespaces/NS/pods/NAME/log`` with
    ``container``, ``follow=true``, ``timestamps=true`` and ``sinceSeconds`` (Kubernetes API
    reference, Pod: "read log of the specified Pod", ``PodLogOptions``).
    """

    def __init__(self, configuration: Any, namespace: str, limit: RateLimit | None = None):
        self.configuration = configuration
        self.limit = limit
        self.namespace = namespace
        self._pacing = asyncio.Lock()
        if configuration.verify_ssl:
            ctx = ssl.create_default_context(cafile=configuration.ssl_ca_cert or None)
        else:
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if configuration.cert_file:
            ctx.load_cert_chain(configuration.cert_file, configuration.key_file or None)
        self._ssl = ctx
        #: ``[client, streams it carries now]``; a client is one connection pool
        self._clients: list[list] = []

    async def _pace(self) -> None:
        """Wait for a spare token of the rate limit (:meth:`RateLimit.take_spare`: Pods being
        created go first), at most :data:`SPARE_WAIT_MAX` seconds, then for a token in the queue
        like any request. One stream polls the bucket at a time; the others wait their turn on
        the lock, so 1,000 waiting streams do not wake 1,000 times per poll."""
        if self.limit is None:
            return
        async with self._pacing:
            deadline = time.monotonic() + SPARE_WAIT_MAX
            while (delay := self.limit.take_spare(keep=STREAM_KEEP)) > 0:
                if time.monotonic() + delay > deadline:
                    if (delay := self.limit.reserve()) > 0:
                        await asyncio.sleep(delay)
                    return
                await asyncio.sleep(delay)

    def _new_client(self) -> httpx.AsyncClient:
        # a quiet log may stay quiet for long: no read timeout; no pool limit (the followers
        # bound their streams themselves); idle connections kept for the next streams (a new
        # one costs a TLS handshake: 6% of the log thread's time at 1,000 Pods with 32 kept);
        # a kubeconfig's proxy-url, as the official client honours it
        return httpx.AsyncClient(
            base_url=self.configuration.host, verify=self._ssl, trust_env=False,
            proxy=getattr(self.configuration, "proxy", None) or None,
            timeout=httpx.Timeout(connect=CONNECT_TIMEOUT, read=None, write=REQUEST_TIMEOUT, pool=None),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=KEEP_ALIVE))

    def _take_client(self) -> list:
        """The least busy client with room for one more stream (a new one when all are full:
        :data:`STREAMS_PER_CLIENT`); the caller gives it back with :meth:`_give_back`."""
        slot = min(self._clients, key=lambda c: c[1], default=None)
        if slot is None or slot[1] >= STREAMS_PER_CLIENT:
            slot = [self._new_client(), 0]
            self._clients.append(slot)
        slot[1] += 1
        return slot

    @staticmethod
    def _give_back(slot: list) -> None:
        slot[1] -= 1

    @asynccontextmanager
    async def stream(self, pod: str, container: str,
                     since_seconds: int | None = None) -> AsyncIterator[AsyncIterator[bytes]]:
        """``async with reader.stream(...) as chunks``: the log's bytes as they come.

        Raises:
            KubeError: 400 while the container has not started, 404 when the Pod is gone, 403
                when RBAC forbids ``pods/log``, 0 when the server was not reached. A stream that
                breaks while read ends the iteration (no error: the caller reopens it).
        """
        what = f"logs of Pod {pod}"
        await self._pace()
        params: dict[str, Any] = {"container": container, "follow": "true", "timestamps": "true"}
        if since_seconds is not None:
            params["sinceSeconds"] = max(1, int(since_seconds))
        headers = {"Accept": "*/*"}
        auth = self.configuration.auth_settings().get("BearerToken")
        if auth and auth.get("value"):
            headers["Authorization"] = auth["value"]
        server_name = getattr(self.configuration, "tls_server_name", None)
        slot = self._take_client()
        try:
            async with slot[0].stream("GET", f"/api/v1/namespaces/{self.namespace}/pods/{pod}/log",
                                        params=params, headers=headers,
                                        extensions={"sni_hostname": server_name} if server_name else None
                                        ) as resp:
                if resp.status_code >= 400:
                    body = await resp.aread()
                    detail = resp.reason_phrase
                    try:
                        detail = json.loads(body).get("message") or detail
                    except (ValueError, AttributeError):
                        pass
                    hint = f" ({RBAC_HINT})" if resp.status_code == 403 else ""
                    raise KubeError(f"{what}: {resp.status_code} {detail}{hint}", resp.status_code)
                yield _chunks(resp)
        except httpx.HTTPError as exc:
            raise KubeError(f"{what}: {type(exc).__name__}: {exc}") from None
        finally:
            self._give_back(slot)

    async def aclose(self) -> None:
        """Close every connection."""
        for client, _ in self._clients:
            await client.aclose()
        self._clients.clear()


async def _chunks(resp: httpx.Response) -> AsyncIterator[bytes]:
    try:
        async for chunk in resp.aiter_raw():
            yield chunk
    except httpx.HTTPError:  # the connection broke: the stream ended
        return
