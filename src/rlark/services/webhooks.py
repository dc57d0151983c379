"""A project's webhooks: what ``rlark webhook``, ``/api/v1/webhooks`` and the console's Webhooks
page share.

A webhook is a name (DNS-1123 label), a URL (:func:`rlark.services.notifications.check_url`),
the Run events it wants (:class:`~rlark.store.webhooks.WebhookEvent`; default all), a format
(``rlark`` JSON or ``slack``) and an optional secret that signs every request. Managing them and
reading their delivery log is for the project's admins, as managing its members is: a webhook
sends the project's Run news out of the server, and a Slack URL is itself a credential. The
secret is write-only: every view says ``set`` or ``unset``. Every change is audited
(``webhook.create``, ``webhook.delete``: name, host, events, format, whether signed; never the
secret, nor the URL's path, which may hold a token).
"""

from __future__ import annotations

import builtins
from typing import Any, Callable
from urllib.parse import urlsplit

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from rlark import settings
from rlark.record.build import iso
from rlark.secretbox import SecretBox
from rlark.services import audit
from rlark.services.auth import Principal, authorize, utcnow
from rlark.services.errors import Conflict, Invalid, NotFound
from rlark.services.notifications import check_url, invalid
from rlark.spec import DNS1123_LABEL
from rlark.store import ProjectRole, ProjectRow, Store
from rlark.store.webhooks import DeliveryRow, DeliveryState, WebhookEvent, WebhookFormat, WebhookRow

#: the most webhooks a project has (each Run event is one request per webhook)
MAX_WEBHOOKS = 20
MIN_SECRET = 16
MAX_SECRET = 256
FIELDS = ("name", "url", "events", "format", "secret")
ALL_EVENTS = [e.value for e in WebhookEvent]


def check_create(body: Any, allow_networks: tuple[str, ...] | list[str] = ()) -> dict[str, Any]:
    """A create request's body (``{"name", "url", "events"?, "format"?, "secret"?}``) checked:
    ``{"name", "url", "events" (sorted values), "format", "secret" (or None)}``. Messages never
    hold the secret.

    Raises:
        Invalid: the first field that is wrong, with its value and the fix.
    """
    if not isinstance(body, dict):
        raise invalid("$", f"the body is {type(body).__name__}, not an object",
                      'send {"name": ..., "url": ..., "events": [...], "format": "rlark", '
                      '"secret": ...}')
    unknown = sorted(str(k)[:40] for k in body if k not in FIELDS)
    if unknown:
        raise invalid(unknown[0], "is not a field of a webhook", f"use only {', '.join(FIELDS)}")
    name = body.get("name")
    if not isinstance(name, str) or len(name) > 63 or not DNS1123_LABEL.match(name):
        shown = name[:63] if isinstance(name, str) else name
        raise invalid("name", f"{shown!r} is not a DNS-1123 label",
                      "use 1-63 lower-case letters, digits and '-', starting and ending with a "
                      "letter or digit, e.g. slack-alerts")
    url = check_url(body.get("url"), allow_networks)
    events = body.get("events", ALL_EVENTS)
    if not isinstance(events, list) or not events:
        raise invalid("events", f"{events!r} is not a list of events",
                      f"give one or more of {', '.join(ALL_EVENTS)} (default: all)")
    for i, e in enumerate(events):
        if e not in ALL_EVENTS:
            raise invalid(f"events[{i}]", f"{str(e)[:40]!r} is not an event",
                          f"use {', '.join(ALL_EVENTS)}")
    fmt = body.get("format", WebhookFormat.rlark.value)
    if fmt not in [f.value for f in WebhookFormat]:
        raise invalid("format", f"{str(fmt)[:40]!r} is not a format",
                      "use rlark (RLark's JSON) or slack (a Slack incoming webhook)")
    secret = body.get("secret")
    if secret is not None:
        if not isinstance(secret, str):
            raise invalid("secret", f"is a {type(secret).__name__}", "give the secret as a string")
        if not MIN_SECRET <= len(secret) <= MAX_SECRET or not secret.isprintable():
            raise invalid("secret", f"has {len(secret)} characters (the value is not shown)",
                          f"use {MIN_SECRET}-{MAX_SECRET} printable characters, e.g. the output "
                          "of `openssl rand -hex 32`")
    return {"name": name, "url": url, "events": sorted(set(events)), "format": fmt,
            "secret": secret}


def url_origin(url: str) -> str:
    """``scheme://host[:port]`` of ``url``: what the audit log says (a path may hold a token)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rsplit('@', 1)[-1]}"


def delivery_view(d: DeliveryRow) -> dict[str, Any]:
    """One entry of the delivery log: ``{"id", "event", "job", "run", "state", "attempts",
    "lastStatus", "lastError", "lastAttemptAt", "nextAttemptAt" (pending only), "createdAt"}``.
    ``lastError`` is what went wrong (no answer, or the receiver's status and first bytes)."""
    facts = d.facts or {}
    return {"id": d.id, "event": d.event.value, "job": facts.get("job"), "run": facts.get("run"),
            "phase": facts.get("phase"), "reason": facts.get("reason"), "state": d.state.value,
            "attempts": d.attempts, "lastStatus": d.last_status, "lastError": d.last_error or None,
            "lastAttemptAt": iso(d.last_attempt_at) if d.last_attempt_at else None,
            "nextAttemptAt": iso(d.next_attempt_at) if d.state == DeliveryState.pending else None,
            "createdAt": iso(d.created_at)}


def webhook_view(row: WebhookRow, project: str, counts: dict[str, int]) -> dict[str, Any]:
    """A webhook as its project's admins see it: ``{"name", "project", "url", "events",
    "format", "secret": "set"|"unset", "createdAt", "createdBy", "deliveries": {state:
    count}}``. Never the secret."""
    return {"name": row.name, "project": project, "url": row.url, "events": list(row.events),
            "format": row.format.value, "secret": "set" if row.sealed_secret else "unset",
            "createdAt": iso(row.created_at), "createdBy": row.created_by,
            "deliveries": {s.value: counts.get(s.value, 0) for s in DeliveryState}}


class WebhookService:
    """Create, list, delete a project's webhooks and read their delivery log (project admins);
    every change audited. ``box``: seals the secrets (the server's, given on first use)."""

    def __init__(self, store: Store, box: SecretBox | Callable[[], SecretBox] | None = None):
        self.store = store
        self._box = box

    @property
    def box(self) -> SecretBox:
        """The box given (or made by the callable given), else one from the settings."""
        if callable(self._box):
            self._box = self._box()
        if self._box is None:
            self._box = SecretBox.from_settings(create=True)
        return self._box

    @staticmethod
    def _project(s: Session, name: str) -> ProjectRow:
        row = s.scalar(select(ProjectRow).where(ProjectRow.name == name))
        if row is None:
            raise NotFound(f"no project named {name!r} that you can see; `rlark project list` "
                           "shows yours")
        return row

    @staticmethod
    def _row(s: Session, project: ProjectRow, name: str) -> WebhookRow:
        row = s.scalar(select(WebhookRow).where(WebhookRow.project_id == project.id,
                                                WebhookRow.name == name)) \
            if DNS1123_LABEL.match(name or "") else None
        if row is None:
            raise NotFound(f"no webhook named {name[:63]!r} in project {project.name!r}; "
                           "`rlark webhook list` lists them")
        return row

    @staticmethod
    def _counts(s: Session, ids: list[int]) -> dict[int, dict[str, int]]:
        out: dict[int, dict[str, int]] = {}
        if ids:
            for hook, state, count in s.execute(
                    select(DeliveryRow.webhook_id, DeliveryRow.state, func.count())
                    .where(DeliveryRow.webhook_id.in_(ids))
                    .group_by(DeliveryRow.webhook_id, DeliveryRow.state)):
                out.setdefault(hook, {})[state.value] = count
        return out

    def list(self, principal: Principal, project: str) -> list[dict[str, Any]]:
        """The project's webhooks, by name (project admins)."""
        authorize(principal, project, ProjectRole.admin)
        with self.store.session() as s:
            prow = self._project(s, project)
            rows = list(s.scalars(select(WebhookRow).where(WebhookRow.project_id == prow.id)
                                  .order_by(WebhookRow.name)))
            counts = self._counts(s, [r.id for r in rows])
            return [webhook_view(r, project, counts.get(r.id, {})) for r in rows]

    def get(self, principal: Principal, project: str, name: str) -> dict[str, Any]:
        """One webhook (project admins). Raises NotFound: no such webhook."""
        authorize(principal, project, ProjectRole.admin)
        with self.store.session() as s:
            row = self._row(s, self._project(s, project), name)
            return webhook_view(row, project, self._counts(s, [row.id]).get(row.id, {}))

    def create(self, principal: Principal, client: str | None, project: str,
               body: Any) -> dict[str, Any]:
        """Register a webhook (project admins); its view, the secret as ``set``/``unset``.

        Raises:
            Invalid: a field is wrong (:func:`check_create`), or the project has
                :data:`MAX_WEBHOOKS`. Conflict: the name is taken.
        """
        authorize(principal, project, ProjectRole.admin)
        spec = check_create(body, settings.webhook_allow_networks())
        sealed = self.box.seal({"secret": spec["secret"]}) if spec["secret"] else None
        actor = principal.actor(client)
        with self.store.session() as s:
            prow = self._project(s, project)
            have = s.scalar(select(func.count()).select_from(WebhookRow)
                            .where(WebhookRow.project_id == prow.id)) or 0
            if s.scalar(select(WebhookRow.id).where(WebhookRow.project_id == prow.id,
                                                    WebhookRow.name == spec["name"])):
                raise Conflict(f"project {project!r} already has a webhook named "
                               f"{spec['name']!r}; delete it first or choose another name")
            if have >= MAX_WEBHOOKS:
                raise invalid("name", f"project {project!r} has {have} webhooks, the most it "
                              "may have", "delete one it no longer needs")
            row = WebhookRow(project_id=prow.id, name=spec["name"], url=spec["url"],
                             events=spec["events"], format=WebhookFormat(spec["format"]),
                             sealed_secret=sealed, created_at=utcnow(), created_by=actor.name)
            s.add(row)
            audit.record(s, actor, "webhook.create", project=project, target=spec["name"],
                         detail=f"to {url_origin(spec['url'])}; events: "
                                f"{', '.join(spec['events'])}; format: {spec['format']}; "
                                f"signed: {'yes' if sealed else 'no'}")
            s.flush()
            return webhook_view(row, project, {})

    def delete(self, principal: Principal, client: str | None, project: str,
               name: str) -> dict[str, Any]:
        """Delete a webhook and its delivery log (project admins); deliveries not yet sent are
        dropped. Raises NotFound: no such webhook."""
        authorize(principal, project, ProjectRole.admin)
        actor = principal.actor(client)
        with self.store.session() as s:
            row = self._row(s, self._project(s, project), name)
            origin = url_origin(row.url)
            s.delete(row)
            audit.record(s, actor, "webhook.delete", project=project, target=name,
                         detail=f"was sending to {origin}")
        return {"name": name, "project": project, "deleted": True}

    def deliveries(self, principal: Principal, project: str, name: str,
                   limit: int = 50) -> builtins.list[dict[str, Any]]:
        """A webhook's delivery log, newest first, at most ``limit`` entries (project admins)."""
        authorize(principal, project, ProjectRole.admin)
        if not 1 <= limit <= 500:
            raise Invalid(f"limit {limit} is out of range; give 1-500")
        with self.store.session() as s:
            row = self._row(s, self._project(s, project), name)
            rows = s.scalars(select(DeliveryRow).where(DeliveryRow.webhook_id == row.id)
                             .order_by(DeliveryRow.id.desc()).limit(limit))
            return [delivery_view(d) for d in rows]
