"""Webhook notifications, the pure part: what a delivery sends (RLark's JSON or a Slack message),
how it is signed, which URLs and addresses a webhook may reach, and how long to wait before the
next attempt. Nothing here does I/O; :mod:`rlark.services.notifier` sends, and
:mod:`rlark.services.webhooks` manages the webhooks.

Signing (docs/notifications.md says how to verify): with a secret, every request carries
``X-RLark-Timestamp: <unix seconds>`` and ``X-RLark-Signature: sha256=<hex>``, the hex
HMAC-SHA256, keyed with the secret, of ``<timestamp>.<body>`` (the timestamp's ASCII digits, a
dot, then the raw body bytes). The timestamp is inside what is signed so a receiver that refuses
old timestamps also refuses a replayed body.

Server-side request forgery: a project admin chooses the URL, and the server makes the request
from inside its own network. A URL must be ``http`` or ``https`` without user information, and
its host must be, and resolve only to, public addresses (:func:`address_refusal`) unless the
server's administrator allowed a network (``RLARK_WEBHOOK_ALLOW_NETWORKS``). The check is made
when a webhook is created (literal addresses and ``localhost`` names) and again before every
attempt, on the addresses the name resolves to then; the request goes to the address that was
checked (DNS rebinding cannot swap it), redirects are not followed, and the environment's proxy
settings are not used.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
from dataclasses import dataclass
from typing import Any, Callable
from urllib.parse import urlsplit

from rlark import __version__, settings
from rlark.preflight.addresses import address_refusal  # noqa: F401  (also this module's, for its users)
from rlark.findings import error
from rlark.services.errors import Invalid
from rlark.store.webhooks import WebhookEvent, WebhookFormat

SIGNATURE_HEADER = "X-RLark-Signature"
TIMESTAMP_HEADER = "X-RLark-Timestamp"
EVENT_HEADER = "X-RLark-Event"
DELIVERY_HEADER = "X-RLark-Delivery"
MAX_URL = 2048
#: how much of a Run's message a delivery carries (its first line, the log tail left out)
MAX_MESSAGE = 300

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True)
class WebhookSettings:
    """How the notifier sends (from the environment: :meth:`from_env`).

    ``timeout``: seconds for each of connect, write and read of one attempt; ``attempts``: the
    most attempts a delivery gets; ``backoff``: seconds before the second attempt, doubled for
    each further one, at most ``backoff_cap``; ``queued_after``: seconds a Run may stay Pending
    before ``run.queued`` is sent; ``senders``: deliveries in flight at once; ``poll``: seconds
    between looks at the outbox; ``keep``: finished deliveries kept per webhook (the log);
    ``allow_networks``: :func:`rlark.settings.webhook_allow_networks`."""

    timeout: float = 10.0
    attempts: int = 5
    backoff: float = 10.0
    backoff_cap: float = 900.0
    queued_after: float = 600.0
    senders: int = 4
    poll: float = 1.0
    keep: int = 200
    allow_networks: tuple[str, ...] = ()

    @classmethod
    def from_env(cls) -> "WebhookSettings":
        """``RLARK_WEBHOOK_TIMEOUT``, ``RLARK_WEBHOOK_ATTEMPTS``, ``RLARK_WEBHOOK_BACKOFF``,
        ``RLARK_WEBHOOK_QUEUED_SECONDS``, ``RLARK_WEBHOOK_SENDERS``, ``RLARK_WEBHOOK_POLL``
        (seconds or counts; unset: the defaults above) and ``RLARK_WEBHOOK_ALLOW_NETWORKS``.

        Raises:
            ValueError: a value that is not a positive number (or a network).
        """
        return cls(timeout=settings.seconds_env("RLARK_WEBHOOK_TIMEOUT", cls.timeout),
                   attempts=settings.positive_int_env("RLARK_WEBHOOK_ATTEMPTS", cls.attempts),
                   backoff=settings.seconds_env("RLARK_WEBHOOK_BACKOFF", cls.backoff),
                   queued_after=settings.seconds_env("RLARK_WEBHOOK_QUEUED_SECONDS",
                                                     cls.queued_after),
                   senders=settings.positive_int_env("RLARK_WEBHOOK_SENDERS", cls.senders),
                   poll=settings.seconds_env("RLARK_WEBHOOK_POLL", cls.poll),
                   allow_networks=tuple(settings.webhook_allow_networks()))


# --- where a webhook may point ---------------------------------------------------------------


def invalid(field: str, message: str, hint: str) -> Invalid:
    """A refused webhook field: a 422 whose message says field, value and fix, and whose one
    Finding (code ``InvalidWebhook``) carries them apart (``path``, ``message``, ``hint``)."""
    return Invalid(f"{field}: {message}; {hint}",
                   findings=[error("InvalidWebhook", field, message, hint)])


def check_url(url: Any, allow_networks: tuple[str, ...] | list[str] = ()) -> str:
    """``url`` if a webhook may have it: ``http`` or ``https``, a host, no user information,
    printable, at most :data:`MAX_URL` characters; a host that is an address (or a
    ``localhost`` name) must pass :func:`address_refusal`. Names are resolved and checked again
    at every attempt (:func:`rlark.services.notifier.resolve_checked`).

    Raises:
        Invalid: which part is wrong, and what to write instead (:func:`invalid`).
    """
    example = "write the receiver's URL, e.g. https://hooks.example.com/rlark"
    if not isinstance(url, str) or not url:
        raise invalid("url", f"{url!r} is not a URL" if not isinstance(url, str)
                      else "is empty", example)
    shown = url[:200]
    if len(url) > MAX_URL or any(c.isspace() or not c.isprintable() for c in url):
        raise invalid("url", f"{shown!r} is longer than {MAX_URL} characters or holds spaces or "
                      "control characters", f"at most {MAX_URL} printable characters, "
                      "spaces percent-encoded (%20)")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise invalid("url", f"{shown!r} is not a URL ({exc})", example) from None
    if parts.scheme not in ("http", "https"):
        raise invalid("url", f"{shown!r} has the scheme {parts.scheme or 'none'!r}",
                      "use https:// (or http://); nothing else is sent to")
    host = parts.hostname
    if not host:
        raise invalid("url", f"{shown!r} names no host", example)
    if parts.username is not None or parts.password is not None:
        raise invalid("url", "holds user information (user:password@), which every admin of "
                      "the project would see", "leave it out; give the webhook a secret and "
                      "verify the signature (X-RLark-Signature) instead")
    if port == 0:
        raise invalid("url", f"{shown!r} has port 0", "leave the port out or give a real one")
    name = host.rstrip(".").lower()
    if name == "localhost" or name.endswith(".localhost"):
        addresses = [ipaddress.ip_address("127.0.0.1")]
    else:
        try:
            addresses = [ipaddress.ip_address(host)]
        except ValueError:
            addresses = []  # a name: resolved and checked before each attempt
    for ip in addresses:
        why = address_refusal(ip, allow_networks)
        if why is not None:
            raise invalid("url", f"{shown!r} points at {ip}, a {why} address (webhooks reach "
                          "public addresses only)", "use a public receiver; the server's "
                          "administrator can allow a network with RLARK_WEBHOOK_ALLOW_NETWORKS "
                          "(e.g. 10.20.0.0/16)")
    return url


# --- what is sent ----------------------------------------------------------------------------


def first_line(message: str, mask: Callable[[str], str] = lambda text: text) -> str:
    """A Run's message as a delivery carries it: masked (``mask``: the Run's secret values to
    ``***``), its first line only (the log tail that follows a failure stays on the server), at
    most :data:`MAX_MESSAGE` characters."""
    line = mask(message or "").strip().splitlines()[0] if (message or "").strip() else ""
    return line if len(line) <= MAX_MESSAGE else line[:MAX_MESSAGE - 1] + "…"


def rlark_payload(delivery: int, event: WebhookEvent, facts: dict[str, Any]) -> dict[str, Any]:
    """RLark's own body: ``{"apiVersion", "kind": "RunEvent", "id" (the delivery's id, also in
    ``X-RLark-Delivery``), "event", "project", "job", "run", "runUid", "phase",
    "previousPhase", "reason", "message", "at"}`` (``at``: when it happened, ISO 8601 UTC;
    ``run.queued`` adds ``"queuedSeconds"``)."""
    keys = ("project", "job", "run", "runUid", "phase", "previousPhase", "reason", "message", "at",
            "queuedSeconds")
    return {"apiVersion": "rlark.io/v1", "kind": "RunEvent", "id": delivery, "event": event.value,
            **{k: facts[k] for k in keys if k in facts}}


_SLACK_WORDS = {WebhookEvent.running: (":arrow_forward:", "is running"),
                WebhookEvent.succeeded: (":white_check_mark:", "succeeded"),
                WebhookEvent.failed: (":x:", "failed"),
                WebhookEvent.stopped: (":black_square_for_stop:", "was stopped"),
                WebhookEvent.queued: (":hourglass:", "is still queued")}


def slack_escape(text: str) -> str:
    """``text`` safe in a Slack message: ``&``, ``<`` and ``>`` as Slack's entities (its
    formatting rules: a ``<...>`` would otherwise become a link or a mention)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_payload(event: WebhookEvent, facts: dict[str, Any]) -> dict[str, Any]:
    """A Slack incoming-webhook message: ``{"text": <one line>, "blocks": [a section in
    mrkdwn]}``; ``text`` is what notifications and clients without blocks show. Every value
    from the Run is escaped (:func:`slack_escape`)."""
    icon, verb = _SLACK_WORDS[event]
    job, project = slack_escape(str(facts.get("job"))), slack_escape(str(facts.get("project")))
    head = f"Run {facts.get('run')} of Job {job} (project {project}) {verb}"
    if event == WebhookEvent.queued and "queuedSeconds" in facts:
        head += f" after {int(facts['queuedSeconds']) // 60} min"
    reason = slack_escape(str(facts["reason"])) if facts.get("reason") else ""
    message = slack_escape(str(facts.get("message") or ""))
    detail = ": ".join(p for p in (reason, message) if p)
    text = f"{icon} {head}" + (f": {detail}" if detail else "")
    body = f"{icon} *{head}*" + (f"\n`{reason}`" if reason else "") + (f" {message}" if message else "")
    return {"text": text, "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": body}}]}


def payload(fmt: WebhookFormat, delivery: int, event: WebhookEvent,
            facts: dict[str, Any]) -> dict[str, Any]:
    """The body of a delivery in the webhook's format."""
    if fmt == WebhookFormat.slack:
        return slack_payload(event, facts)
    return rlark_payload(delivery, event, facts)


def encode(body: dict[str, Any]) -> bytes:
    """The bytes sent (and signed): compact JSON, UTF-8."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode()


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """``sha256=<hex>``: HMAC-SHA256 keyed with ``secret`` (UTF-8) of ``b"<timestamp>." + body``."""
    mac = hmac.new(secret.encode(), str(timestamp).encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def verify(secret: str, timestamp: str, body: bytes, header: str) -> bool:
    """Whether ``header`` (``X-RLark-Signature``) signs ``body`` sent at ``timestamp``
    (``X-RLark-Timestamp``); compared in constant time. What a receiver does (it should also
    refuse a timestamp far from its own clock)."""
    if not timestamp.isdigit():
        return False
    return hmac.compare_digest(signature(secret, int(timestamp), body), header)


def headers(event: WebhookEvent, delivery: int, body: bytes, secret: str | None,
            timestamp: int) -> dict[str, str]:
    """The headers of one attempt: content type, user agent, event, delivery id, timestamp, and
    the signature when the webhook has a secret."""
    out = {"Content-Type": "application/json", "User-Agent": f"RLark-Webhook/{__version__}",
           EVENT_HEADER: event.value, DELIVERY_HEADER: str(delivery),
           TIMESTAMP_HEADER: str(timestamp)}
    if secret:
        out[SIGNATURE_HEADER] = signature(secret, timestamp, body)
    return out


# --- what an answer means ----------------------------------------------------------------------


def retryable(status: int | None) -> bool:
    """Whether another attempt may succeed: no answer (a refused connection, a timeout), 408,
    429 or 5xx. Any other non-2xx answer (a 404, a 401 for a wrong signature, a redirect, which
    is not followed) fails the delivery at once."""
    return status is None or status in (408, 429) or status >= 500


def backoff(attempts: int, base: float, cap: float) -> float:
    """Seconds to wait after ``attempts`` failed attempts: ``base``, then doubled each time, at
    most ``cap``."""
    return min(cap, base * 2 ** max(0, attempts - 1))
