"""The notifier: sends the webhooks' deliveries from the outbox (``webhook_deliveries``), apart from
the controller, with a bounded number of senders, bounded timeouts, retries with backoff, and
the outcome of every attempt in the delivery log.

One thread looks at the outbox every ``poll`` seconds: it adds ``run.queued`` deliveries for Runs
Pending longer than ``queued_after``, claims due deliveries (at most as many as there are free
senders) and hands them to a pool of ``senders`` threads. A claim is a conditional UPDATE that
holds the delivery for a while (``claimed_until``), so several servers on one store (replicas)
never send one delivery at once; a server that dies holding one leaves it to be claimed again.
An attempt reads the delivery in a short transaction, sends with no transaction open, and writes
the outcome in another.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Callable
from urllib.parse import urlsplit, urlunsplit

import httpx
from sqlalchemy import and_, delete, or_, select, update
from sqlalchemy.exc import IntegrityError

from rlark.secretbox import SecretBox
from rlark.services import notifications as n
from rlark.services.notifications import WebhookSettings
from rlark.services.secrets import masker
from rlark.status import Phase
from rlark.store import JobRow, ProjectRow, RunRow, Store
from rlark.store.models import utcnow
from rlark.store.webhooks import (DeliveryRow, DeliveryState, WebhookEvent, WebhookRow,
                                  add_deliveries, event_facts, subscribers)

log = logging.getLogger("rlark.notifier")

#: how much of a receiver's answer the log keeps (its first bytes, to say why it refused)
MAX_ANSWER = 200


IPAddressText = str


class Refused(Exception):
    """The URL's host resolves to an address the server may not send to; never retried."""


def resolve_checked(host: str, port: int,
                    allow_networks: tuple[str, ...] | list[str]) -> IPAddressText:
    """The address to connect to for ``host``: every address it resolves to must pass
    :func:`rlark.services.notifications.address_refusal` (one that does not refuses them all:
    a name that points partly inside is refused, whatever the order of the answers).

    Raises:
        Refused: an address is refused, or the name does not resolve (the message says which).
    """
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise Refused(f"{host} does not resolve ({exc.strerror or exc})") from None
    addresses = [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos]
    for ip in addresses:
        why = n.address_refusal(ip, allow_networks)
        if why is not None:
            raise Refused(f"{host} resolves to {ip}, a {why} address; refused (the server's "
                          "administrator can allow a network: RLARK_WEBHOOK_ALLOW_NETWORKS)")
    return str(addresses[0])


def send(url: str, body: bytes, headers: dict[str, str], timeout: float,
         allow_networks: tuple[str, ...] | list[str]) -> tuple[int, str]:
    """POST ``body`` to ``url`` at the address its host resolves to now, checked
    (:func:`resolve_checked`); TLS still verifies the certificate for the host's name. No
    redirects followed, no proxy from the environment. ``(status, first bytes of the
    answer)``.

    Raises:
        Refused: the host's address is refused. httpx.HTTPError: no answer.
    """
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    ip = resolve_checked(host, port, allow_networks)
    literal = f"[{ip}]" if ":" in ip else ip
    target = urlunsplit((parts.scheme, f"{literal}:{port}", parts.path or "/", parts.query, ""))
    netloc = parts.netloc.rsplit("@", 1)[-1]
    extensions = {"sni_hostname": host} if parts.scheme == "https" else {}
    with httpx.Client(trust_env=False, follow_redirects=False,
                      timeout=httpx.Timeout(timeout)) as client:
        request = client.build_request("POST", target, content=body,
                                       headers={**headers, "Host": netloc},
                                       extensions=extensions)
        response = client.send(request, stream=True)
        try:
            answer = b""
            for chunk in response.iter_raw():
                answer += chunk
                if len(answer) >= MAX_ANSWER:
                    break
        finally:
            response.close()
    return response.status_code, answer[:MAX_ANSWER].decode("utf-8", "replace")


class Notifier:
    """Sends the outbox's deliveries (module docstring). ``box``: the server's secret box, for
    the webhooks' signing secrets and the Runs' secret values (what messages are masked with);
    asked for on first use. ``config``: :class:`WebhookSettings` (default: from the
    environment). ``clock``: seconds since the epoch."""

    def __init__(self, store: Store, box: Callable[[], SecretBox | None],
                 config: WebhookSettings | None = None, clock: Callable[[], float] = time.time):
        self.store = store
        self._box = box
        self.config = config or WebhookSettings.from_env()
        self.clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._in_flight = 0
        self._lock = threading.Lock()
        self._passes = 0

    def start(self) -> None:
        """Start looking at the outbox (a daemon thread) with the pool of senders."""
        self._stop.clear()
        self._pool = ThreadPoolExecutor(self.config.senders, thread_name_prefix="rlark-webhook")
        self._thread = threading.Thread(target=self._loop, name="rlark-notifier", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop claiming; wait up to ``timeout`` s for the look in progress, and let attempts in
        flight end within their own timeouts (a delivery they leave is claimed again later)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_pass()
            except Exception:  # the database away, a bug: logged, and the next look tries again
                log.exception("the webhook notifier's pass failed")
            self._stop.wait(self.config.poll)

    def run_pass(self) -> int:
        """One look at the outbox: queued Runs noticed, due deliveries claimed and handed to
        the senders (none when ``start`` was not called: then they are sent here, one by one).
        The count claimed."""
        self._passes += 1
        self.enqueue_queued()
        if self._passes % 60 == 1:
            self.prune()
        with self._lock:
            free = self.config.senders - self._in_flight
        claimed = self.claim(free) if free > 0 else []
        for delivery in claimed:
            if self._pool is None:
                self.attempt(delivery)
                continue
            with self._lock:
                self._in_flight += 1
            self._pool.submit(self._send_one, delivery)
        return len(claimed)

    def _send_one(self, delivery: int) -> None:
        try:
            self.attempt(delivery)
        except Exception:
            log.exception("webhook delivery %s failed unexpectedly", delivery)
        finally:
            with self._lock:
                self._in_flight -= 1

    def enqueue_queued(self) -> int:
        """Add ``run.queued`` for each Run Pending longer than ``queued_after`` whose project has
        webhooks that want it (once per Run and webhook). The count added."""
        now = utcnow()
        cutoff = now - timedelta(seconds=self.config.queued_after)
        added = 0
        with self.store.session() as s:
            wanted = {w.project_id for w in s.scalars(select(WebhookRow))
                      if WebhookEvent.queued.value in (w.events or [])}
            if not wanted:
                return 0
            runs = s.execute(select(RunRow, ProjectRow.name)
                             .join(JobRow, JobRow.id == RunRow.job_id)
                             .join(ProjectRow, ProjectRow.id == JobRow.project_id)
                             .where(RunRow.phase == Phase.Pending, RunRow.created_at <= cutoff,
                                    JobRow.project_id.in_(wanted))).all()
            for run, project in runs:
                facts = event_facts(run, project, Phase.Pending, None, run.reason, run.message, now)
                facts["queuedSeconds"] = int((now - run.created_at).total_seconds())
                added += add_deliveries(s, run, WebhookEvent.queued, facts,
                                        subscribers(s, run.job.project_id, WebhookEvent.queued))
            try:
                s.commit()
            except IntegrityError:  # another server added the same ones first
                s.rollback()
                return 0
        return added

    def claim(self, limit: int) -> list[int]:
        """Up to ``limit`` due deliveries, each held by this notifier for one attempt's time
        (a conditional UPDATE each: another server's claim wins or loses whole)."""
        now = utcnow()
        free = or_(DeliveryRow.claimed_until.is_(None), DeliveryRow.claimed_until < now)
        due = and_(DeliveryRow.state == DeliveryState.pending, DeliveryRow.next_attempt_at <= now,
                   free)
        hold = now + timedelta(seconds=4 * self.config.timeout + 60)
        got: list[int] = []
        with self.store.session() as s:
            ids = list(s.scalars(select(DeliveryRow.id).where(due)
                                 .order_by(DeliveryRow.next_attempt_at).limit(limit)))
            for i in ids:
                done = s.execute(update(DeliveryRow).where(DeliveryRow.id == i, due)
                                 .values(claimed_until=hold))
                if getattr(done, "rowcount", 0) == 1:
                    got.append(i)
            s.commit()
        return got

    def _mask(self, s, run_id: int) -> Callable[[str], str] | None:
        """A function masking the Run's secret values; None when they cannot be known (the
        Run is gone, or its values cannot be opened): then no message is sent."""
        run = s.get(RunRow, run_id)
        if run is None:
            return None
        if not run.sealed_secrets:
            return lambda text: text
        box = self._box()
        if box is None:
            return None
        try:
            return masker(box.open(run.sealed_secrets, f"the secrets of run {run.number}").values())
        except ValueError:
            return None

    def attempt(self, delivery: int) -> None:
        """One attempt at a claimed delivery: read it, send it (no transaction open), write
        the outcome (succeeded, failed, or pending again after :func:`backoff`)."""
        with self.store.session() as s:
            row = s.get(DeliveryRow, delivery)
            hook = s.get(WebhookRow, row.webhook_id) if row is not None else None
            if row is None or hook is None or row.state != DeliveryState.pending:
                return
            facts = dict(row.facts)
            mask = self._mask(s, row.run_id)
            facts["message"] = n.first_line(facts.get("message") or "", mask) if mask else ""
            secret = None
            if hook.sealed_secret:
                box = self._box()
                secret = box.open(hook.sealed_secret, f"webhook {hook.name!r}")["secret"] \
                    if box is not None else None
            event, fmt, url = row.event, hook.format, hook.url
        body = n.encode(n.payload(fmt, delivery, event, facts))
        heads = n.headers(event, delivery, body, secret, int(self.clock()))
        status: int | None = None
        error = ""
        try:
            status, answer = send(url, body, heads, self.config.timeout,
                                  self.config.allow_networks)
            if not 200 <= status < 300:
                error = f"HTTP {status}" + (f": {answer.strip()}" if answer.strip() else "")
        except Refused as exc:
            error, status = str(exc), -1
        except httpx.HTTPError as exc:
            error = f"{type(exc).__name__}: {exc}"[:500]
        self._record(delivery, status, error)

    def _record(self, delivery: int, status: int | None, error: str) -> None:
        now = utcnow()
        with self.store.session() as s:
            row = s.get(DeliveryRow, delivery)
            if row is None:  # its webhook was deleted meanwhile
                return
            row.attempts += 1
            row.last_attempt_at, row.claimed_until = now, None
            row.last_status = status if status is not None and status >= 0 else None
            row.last_error = error
            if status is not None and 200 <= status < 300:
                row.state = DeliveryState.succeeded
            elif status != -1 and n.retryable(status) and row.attempts < self.config.attempts:
                row.next_attempt_at = now + timedelta(seconds=n.backoff(
                    row.attempts, self.config.backoff, self.config.backoff_cap))
            else:
                row.state = DeliveryState.failed
            attempts = row.attempts
        log.info("webhook delivery %s: attempt %s, %s", delivery, attempts,
                 error or f"HTTP {status}")

    def prune(self) -> int:
        """Keep the newest ``keep`` finished deliveries of each webhook; the count removed."""
        removed = 0
        with self.store.session() as s:
            for hook_id in list(s.scalars(select(WebhookRow.id))):
                oldest_kept = s.scalar(
                    select(DeliveryRow.id).where(DeliveryRow.webhook_id == hook_id,
                                                 DeliveryRow.state != DeliveryState.pending)
                    .order_by(DeliveryRow.id.desc()).offset(self.config.keep - 1).limit(1))
                if oldest_kept is None:
                    continue
                done = s.execute(delete(DeliveryRow).where(
                    DeliveryRow.webhook_id == hook_id, DeliveryRow.id < oldest_kept,
                    DeliveryRow.state != DeliveryState.pending))
                removed += getattr(done, "rowcount", 0) or 0
            s.commit()
        return removed
