"""The server's own texts in the console's language: Finding messages and hints, event texts and
reason codes, as codes + parameters.

A Finding (and an Event) is identified by its ``code`` (its ``reason``); the API and the store
keep its English text. ``catalogs/messages.json`` holds, per code, the English templates the
server writes and the Chinese template of each (``{"finding": {code: {"message": [[en, zh]...],
"hint": [[en, zh]...], "console": [[en hint or "*", en, zh]...]}}, "event": {reason: [[en,
zh]...]}, "reason": {code: zh label}}``). :func:`localize` finds the English template of the
code that the text matches, which gives the parameters (paths, values, counts: ``{name}``
placeholders; ``{s}`` stands for an optional plural "s" and is not a parameter), and writes the
template of the other language with them. A text no template matches stays English (the
fallback), so a new message is never lost, only untranslated until the catalog learns it.

``console`` entries give a hint that fits the console instead of one that tells people to run a
command (``rlark submit FILE``): they apply in every language.
"""

from __future__ import annotations

import json
import re
import string
from functools import lru_cache
from pathlib import Path
from typing import Any

CATALOG = Path(__file__).parent / "catalogs" / "messages.json"
#: placeholders that match an optional English plural ending and carry no value
_PLURAL = re.compile(r"^s\d*$")


class Template:
    """One English template compiled to a pattern, with its translation."""

    def __init__(self, en: str, other: str):
        self.en = en
        self.other = other
        parts = []
        seen: set[str] = set()
        for literal, field, _, _ in string.Formatter().parse(en):
            parts.append(re.escape(literal))
            if field is None:
                continue
            if _PLURAL.match(field):
                parts.append("s?")
            elif field in seen:
                parts.append(f"(?P={field})")
            else:
                seen.add(field)
                parts.append(f"(?P<{field}>.+?)")
        self.pattern = re.compile("".join(parts), re.DOTALL)

    def match(self, text: str) -> dict[str, str] | None:
        m = self.pattern.fullmatch(text)
        return m.groupdict() if m else None

    def render(self, values: dict[str, str]) -> str:
        return _fill(self.other, values)


def _fill(template: str, values: dict[str, str]) -> str:
    """``template`` with ``{name}`` replaced by ``values`` (plural markers dropped); a name the
    values lack is left as written rather than failing."""
    out = []
    for literal, field, _, _ in string.Formatter().parse(template):
        out.append(literal)
        if field is not None and not _PLURAL.match(field):
            out.append(values.get(field, "{" + field + "}"))
    return "".join(out)


@lru_cache(maxsize=1)
def catalog() -> dict[str, Any]:
    """The compiled catalog: ``finding``/``event`` entries as :class:`Template` lists."""
    raw = json.loads(CATALOG.read_text(encoding="utf-8"))
    findings = {}
    for code, entry in raw["finding"].items():
        findings[code] = {
            "message": [Template(en, zh) for en, zh in entry.get("message", [])],
            "hint": [Template(en, zh) for en, zh in entry.get("hint", [])],
            "console": [(None if pattern == "*" else Template(pattern, pattern), Template(en, zh))
                        for pattern, en, zh in entry.get("console", [])],
        }
    events = {reason: [Template(en, zh) for en, zh in items]
              for reason, items in raw["event"].items()}
    return {"finding": findings, "event": events, "reason": raw["reason"]}


def _translate(templates: list[Template], text: str, zh: bool,
               values: dict[str, str]) -> str:
    for tpl in templates:
        found = tpl.match(text)
        if found is not None:
            values.update(found)
            return tpl.render(values) if zh else text
    return text


def localize_finding(code: str, message: str, hint: str, locale: str,
                     where: str = "console") -> tuple[str, str]:
    """``(message, hint)`` of a Finding in ``locale`` (``en`` or ``zh-CN``), the hint fitting
    ``where`` the reader is (``console``: no CLI commands to run on a file). Texts the catalog
    does not know stay as they are."""
    entry = catalog()["finding"].get(code)
    if entry is None:
        return message, hint
    zh = locale == "zh-CN"
    values: dict[str, str] = {}
    first, sep, rest = message.partition("\n")  # further lines (a log excerpt) stay as written
    message = _translate(entry["message"], first, zh, values) + sep + rest
    if where == "console":
        for pattern, tpl in entry["console"]:
            found = pattern.match(hint) if pattern is not None else {}
            if found is not None:
                values.update(found)
                return message, _fill(tpl.other if zh else tpl.en, values)
    return message, _translate(entry["hint"], hint, zh, values)


def localize_event(reason: str, message: str, locale: str) -> str:
    """An event's text in ``locale``: by the event's reason, or, for the warnings a Job's
    Findings are recorded as (reason = the Finding's code), as that Finding's message."""
    if locale != "zh-CN" or not message:
        return message
    first, sep, rest = message.partition("\n")
    templates = catalog()["event"].get(reason)
    if templates is None:
        entry = catalog()["finding"].get(reason)
        templates = entry["message"] if entry else []
    return _translate(templates, first, True, {}) + sep + rest


def reason_label(code: str | None, locale: str) -> str:
    """A reason code (``PrepareFailed``) as people read it in ``locale``; the code itself in
    English and where the catalog has no label."""
    if not code:
        return ""
    if locale == "zh-CN":
        return catalog()["reason"].get(code, code)
    return code
