"""The console's languages: one JSON catalog per locale (``catalogs/<locale>.json``, flat keys),
the choice remembered per browser in a cookie, English as the fallback.

Values are :meth:`str.format` templates (``"Delete Job “{name}”?"``); what the format fills in
is escaped by the templates like any other value.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

CATALOG_DIR = Path(__file__).parent / "catalogs"
LOCALES = ("en", "zh-CN")
DEFAULT_LOCALE = "en"
COOKIE = "rlark_lang"
#: language names as their speakers write them, the same in every locale (not translated)
ENDONYMS = {"en": "English", "zh-CN": "简体中文"}


@lru_cache(maxsize=None)
def catalog(locale: str) -> dict[str, str]:
    """The catalog of ``locale`` (one of :data:`LOCALES`)."""
    return json.loads((CATALOG_DIR / f"{locale}.json").read_text(encoding="utf-8"))


def negotiate(cookie: str | None, accept_language: str | None) -> str:
    """The locale for a request: the cookie when it names a known locale, else the first
    ``Accept-Language`` entry RLark speaks (any ``zh`` is Simplified Chinese), else English."""
    if cookie in LOCALES:
        return cookie
    for part in (accept_language or "").split(","):
        tag = part.split(";", 1)[0].strip().lower()
        if tag.startswith("zh"):
            return "zh-CN"
        if tag.startswith("en"):
            return "en"
    return DEFAULT_LOCALE


class Translator:
    """``t("jobs.title")`` -> the label in this locale (English, then the key, as fallbacks)."""

    def __init__(self, locale: str):
        self.locale = locale if locale in LOCALES else DEFAULT_LOCALE
        self._cat = catalog(self.locale)
        self._en = catalog(DEFAULT_LOCALE)

    def __call__(self, key: str, **values) -> str:
        text = self._cat.get(key) or self._en.get(key) or key
        return text.format(**values) if values else text

    def has(self, key: str) -> bool:
        return key in self._cat or key in self._en

    def of(self, group: str, value: str | None) -> str:
        """The label of ``value`` in ``group`` (``phase``, ``cause``, ``ev``...) in this locale;
        the value itself when the catalogs have none (a reason code, a new phase)."""
        if not value:
            return ""
        key = f"{group}.{value}"
        return self(key) if self.has(key) else value

    def finding(self, f) -> tuple[str, str]:
        """A Finding's ``(message, hint)`` in this locale, the hint as fits the console
        (:func:`rlark.console.messages.localize_finding`); ``f`` is a Finding or its dict."""
        from rlark.console.messages import localize_finding

        get = f.get if isinstance(f, dict) else lambda k, d="": getattr(f, k, d)
        return localize_finding(get("code", ""), get("message", "") or "", get("hint", "") or "",
                                self.locale)

    def event(self, e: dict) -> str:
        """An event's text in this locale (:func:`rlark.console.messages.message_text`)."""
        from rlark.console.messages import message_text

        return message_text(e.get("reason") or "", e.get("message") or "", self.locale)

    def message(self, reason: str | None, text: str | None) -> str:
        """A Run's, Job's, Worker's or condition's message, known by its reason, in this
        locale (:func:`rlark.console.messages.message_text`)."""
        from rlark.console.messages import message_text

        return message_text(reason or "", text or "", self.locale)

    def reason(self, code: str | None) -> str:
        """A reason code in this locale (:func:`rlark.console.messages.reason_label`)."""
        from rlark.console.messages import reason_label

        return reason_label(code, self.locale)

    def check_item(self, check: dict) -> str:
        """What a record check verifies, in this locale."""
        from rlark.console.messages import check_item

        return check_item(str(check.get("id") or ""), str(check.get("item") or ""), self.locale)

    def evidence(self, check: dict, line: str) -> str:
        """One line of a record check's evidence in this locale."""
        from rlark.console.messages import check_evidence

        return check_evidence(str(check.get("id") or ""), str(line), self.locale)

    def ray_node(self, view: dict | None) -> str:
        """A Task's Ray node (each Worker's ``ray start`` resources) in this locale."""
        from rlark.console.messages import ray_node_text

        return ray_node_text(view, self.locale)

    def phase(self, phase: str | None) -> str:
        """A Run/Job/Task/Worker phase in this locale (the phase itself when unknown)."""
        return self.of("phase", phase)

    def duration(self, seconds: float | None) -> str:
        if seconds is None:
            return ""
        s = max(int(seconds), 0)
        h, rest = divmod(s, 3600)
        m, s = divmod(rest, 60)
        if h:
            return self("dur.hm", h=h, m=m)
        if m:
            return self("dur.ms", m=m, s=s)
        return self("dur.s", s=s)
