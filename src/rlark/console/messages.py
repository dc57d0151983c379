"""The server's own texts in the reader's language: Finding messages and hints, the messages of
Runs, Jobs, Workers, conditions and Events, reason codes, record check items and evidence, and
the Ray node summary of each Task. Pure (standard library only): the console and the CLI
(``rlark describe``/``get``/``events``) render with it.

Every such text is a *message*: a code and its parameters. The code is the Finding's ``code``,
the reason of the Run, Worker, condition or Event, or the check's ``id``; the parameters are the
paths, values, names and counts in it. The producers (the controller, the Worker bootstrap, the
runtimes, preflight, the record builder) keep writing the English text, which the API, the
store and the record keep; ``catalogs/messages.json`` holds, per code, the English template of
each form the producers write and the Chinese template of it, so the English text is the
message's wire form: :class:`Template` reads the parameters back out of it and writes them into
the other language's template. A text no template matches stays English (the fallback: a new
message is never lost, only untranslated until the catalog learns it; the tests drive the
producers to find any).

The catalog (``{"event": {reason: [[en, zh]...]}, "text": [[en, zh]...], "finding": {code:
{"message": [[en, zh]...], "hint": [[en, zh]...], "console": [[en hint or "*", en, zh]...]}},
"reason": {code: zh label}, "check": {id: {"item": zh, "evidence": [[en, zh]...]}}}``):

* ``event``: by reason, the messages of Events, Runs, Jobs, Workers and conditions;
* ``text``: messages that come with any reason (parts of others, through ``{x:msg}``);
* ``console``: a hint that fits the console instead of one that tells people to run a command
  (``rlark submit FILE``); applies in every language.

Placeholders in an English template: ``{name}`` any text; ``{name:n}`` a number; ``{name:msg}``
a message itself, rendered through the catalog in turn (a Worker's own report inside the
controller's sentence), ``{name:optmsg}`` one that may be empty; ``{name:opt}`` any text, maybe
none; ``{name:list}`` / ``{name:parts}`` messages joined by ", " / "; "; ``{name:ranks}``
``rank 0 (NAME), ...``; ``{name:nums}`` ``0, 2``; ``{name:doing}`` ``NAME: Phase; ...``;
``{name:phase}`` a phase; ``{name:word}`` one word; ``{name:byrole}`` ``ROLE: message; ...``; ``{name:reason}`` a reason code, shown as its label; ``{s}`` (``{s2}``...)
an optional English plural "s", no parameter. A Chinese template puts free English text that a
parameter carries (Ray's or Kubernetes' own words) between backticks, as code.
"""

from __future__ import annotations

import json
import re
import string
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterable

CATALOG = Path(__file__).parent / "catalogs" / "messages.json"
LOCALES = ("en", "zh-CN")
#: placeholders that match an optional English plural ending and carry no value
_PLURAL = re.compile(r"^s\d*$")
_KINDS = {"": r".+?", "n": r"-?\d+(?:\.\d+)?", "msg": r".+?", "list": r".+?", "parts": r".+?",
          "ranks": r".+?", "nums": r"\d+(?:, \d+)*", "opt": r".*?", "optmsg": r".*?", "word": r"[\w.-]+", "byrole": r".+?",
          "doing": r".+?", "reason": r"[A-Za-z]+", "phase": r"[A-Za-z]+"}
_RANK = re.compile(r"rank (\d+) \(([^()]*)\)")
#: recursion bound for ``{x:msg}`` parameters
_DEPTH = 4
#: the line a failure's message gives before the blamed Worker's last log lines
#: (rlark.controller.lifecycle.with_tail)
_TAIL = re.compile(r"last lines of (?P<worker>\S+):")


class Template:
    """One English template compiled to a pattern, with its translation."""

    def __init__(self, en: str, other: str):
        self.en = en
        self.other = other
        self.kinds: dict[str, str] = {}
        #: characters of fixed text: the more, the more specific (:func:`_pairs` tries those first)
        self.literal = 0
        parts = []
        for literal, field, spec, _ in string.Formatter().parse(en):
            self.literal += len(literal)
            parts.append(re.escape(literal))
            if field is None:
                continue
            if _PLURAL.match(field):
                parts.append("s?")
            elif field in self.kinds:
                parts.append(f"(?P={field})")
            else:
                kind = spec or ""
                if kind not in _KINDS:
                    raise ValueError(f"template {en!r}: unknown placeholder kind {kind!r}")
                self.kinds[field] = kind
                parts.append(f"(?P<{field}>{_KINDS[kind]})")
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


def _pairs(items: Iterable[list[str]]) -> list[Template]:
    """Templates, the most specific (most fixed text) first: a text two templates match is a
    composite (``queued in Q: needs 1 CPU, 1.0 GiB memory``), which the general one (``{mem}
    memory``) would swallow whole; among equals the catalog's order holds."""
    return sorted((Template(en, zh) for en, zh in items), key=lambda t: -t.literal)


@lru_cache(maxsize=1)
def catalog() -> dict[str, Any]:
    """The compiled catalog (:class:`Template` lists; see the module's docstring)."""
    raw = json.loads(CATALOG.read_text(encoding="utf-8"))
    findings = {}
    for code, entry in raw["finding"].items():
        findings[code] = {
            "message": _pairs(entry.get("message", [])),
            "hint": _pairs(entry.get("hint", [])),
            "console": [(None if pattern == "*" else Template(pattern, pattern), Template(en, zh))
                        for pattern, en, zh in entry.get("console", [])],
        }
    return {"finding": findings,
            "event": {reason: _pairs(items) for reason, items in raw["event"].items()},
            "text": _pairs(raw.get("text", [])),
            "reason": raw["reason"],
            "check": {cid: {"item": entry.get("item", ""),
                            "evidence": _pairs(entry.get("evidence", []))}
                      for cid, entry in raw.get("check", {}).items()}}


def _translate(templates: list[Template], text: str, zh: bool, values: dict[str, str],
               depth: int = 0) -> str | None:
    """``text`` through the first template that matches it (None: none does); its parameters
    go into ``values``."""
    for tpl in templates:
        found = tpl.match(text)
        if found is None:
            continue
        if zh:
            for name, kind in tpl.kinds.items():
                found[name] = _parameter(kind, found[name], depth)
        values.update(found)
        return tpl.render(found) if zh else text
    return None


def _parameter(kind: str, value: str, depth: int) -> str:
    """A parameter of ``kind`` (see the module's docstring) in Chinese."""
    if kind in ("msg", "optmsg") and depth < _DEPTH:
        return message_text("", value, "zh-CN", depth + 1)
    if kind in ("list", "parts") and depth < _DEPTH:  # "a, b, c" or "a; b": each a message
        sep, joiner = (", ", "，") if kind == "list" else ("; ", "；")
        return joiner.join(message_text("", part, "zh-CN", depth + 1) for part in value.split(sep))
    if kind == "ranks":  # "rank 0 (x), rank 2 (y)"
        return _RANK.sub(r"序号 \1（\2）", value).replace("), ", ")、").replace("）, ", "）、")
    if kind == "doing":  # "x: Preparing; y: not started"
        parts = []
        for part in value.split("; "):
            who, sep, what = part.rpartition(": ")
            said = _WORKER_DOING.get(what) or phase_label(what, "zh-CN")
            parts.append(f"{who}{sep and '：'}{said}")
        return "；".join(parts)
    if kind == "byrole" and depth < _DEPTH:  # "role: why; role: why" (a location's backing)
        parts = []
        for part in value.split("; "):
            role, sep, why = part.partition(": ")
            parts.append(f"{role}：{message_text('', why, 'zh-CN', depth + 1)}" if sep else part)
        return "；".join(parts)
    if kind == "reason":
        return reason_label(value, "zh-CN")
    if kind == "phase":
        return phase_label(value, "zh-CN")
    return value


#: what a Worker that has not joined is doing when it reported no phase
#: (rlark.controller.phases.join_timeout_of)
_WORKER_DOING = {"not started": "未启动", "starting": "正在启动"}


def phase_label(phase: str | None, locale: str) -> str:
    """A Run, Task or Worker phase in ``locale`` (the console's ``phase.*`` labels)."""
    from rlark.console.i18n import catalog as labels

    if not phase:
        return ""
    return labels(locale).get(f"phase.{phase}") or labels("en").get(f"phase.{phase}") or phase


def localize_finding(code: str, message: str, hint: str, locale: str,
                     where: str = "console") -> tuple[str, str]:
    """``(message, hint)`` of a Finding in ``locale`` (``en`` or ``zh-CN``), the hint fitting
    ``where`` the reader is (``console``: no CLI commands to run on a file; ``cli``: as
    written). Texts the catalog does not know stay as they are."""
    entry = catalog()["finding"].get(code)
    if entry is None:
        return message, hint
    zh = locale == "zh-CN"
    values: dict[str, str] = {}
    first, sep, rest = message.partition("\n")  # further lines (a log excerpt) stay as written
    said = _translate(entry["message"], first, zh, values)
    message = (first if said is None else said) + sep + rest
    if where == "console":
        for pattern, tpl in entry["console"]:
            found = pattern.match(hint) if pattern is not None else {}
            if found is not None:
                values.update(found)
                return message, _fill(tpl.other if zh else tpl.en, values)
    said = _translate(entry["hint"], hint, zh, values)
    return message, hint if said is None else said


def message_text(reason: str | None, message: str | None, locale: str, depth: int = 0) -> str:
    """A message of a Run, Job, Worker, condition or Event in ``locale``: found among its
    reason's templates, then among those any reason may come with, then (the warnings a Job's
    Findings are recorded as: reason = the Finding's code) as that Finding's message. Its first
    line is the message; a failure's further lines (the blamed Worker's last log lines) stay
    as written, but for the line that introduces them."""
    message = message or ""
    if locale != "zh-CN" or not message:
        return message
    cat = catalog()
    first, sep, rest = message.partition("\n")
    if reason == "ChecksFailed":  # "<check id>: <its first evidence>; ..." (record_condition)
        return _failed_checks(first) + sep + rest
    templates = list(cat["event"].get(reason or "", []))
    entry = cat["finding"].get(reason or "")
    if entry is not None:
        templates += entry["message"]
    said = _translate(templates + cat["text"], first, True, {}, depth)
    if rest:
        head, nl, tail = rest.partition("\n")
        m = _TAIL.fullmatch(head)
        if m:
            rest = _fill(_TAIL_ZH, m.groupdict()) + nl + tail
    return (first if said is None else said) + sep + rest


_TAIL_ZH = "{worker} 的最后几行日志："


def _failed_checks(text: str) -> str:
    """The ``RecordVerified`` False message (:func:`rlark.record.finish.record_condition`:
    ``"<check id>: <evidence>; ..."``) in Chinese, each evidence as its check's."""
    ids = sorted(catalog()["check"], key=len, reverse=True)
    at = re.compile(r"(?:^|; )(" + "|".join(map(re.escape, ids)) + r"): ")
    marks = list(at.finditer(text))
    if not marks or marks[0].start() != 0:
        return text
    out = []
    for m, nxt in zip(marks, marks[1:] + [None]):
        evidence = text[m.end():nxt.start() if nxt else len(text)]
        out.append(f"`{m.group(1)}`：{check_evidence(m.group(1), evidence, 'zh-CN')}")
    return "；".join(out)


def localize_event(reason: str, message: str, locale: str) -> str:
    """An Event's text in ``locale`` (:func:`message_text`)."""
    return message_text(reason, message, locale)


def reason_label(code: str | None, locale: str) -> str:
    """A reason code (``PrepareFailed``) as people read it in ``locale``; the code itself in
    English and where the catalog has no label."""
    if not code:
        return ""
    if locale == "zh-CN":
        return catalog()["reason"].get(code, code)
    return code


def check_item(cid: str, item: str, locale: str) -> str:
    """What record check ``cid`` verifies (the record's ``item``) in ``locale``."""
    if locale == "zh-CN":
        return catalog()["check"].get(cid, {}).get("item") or item
    return item


def check_evidence(cid: str, evidence: str, locale: str) -> str:
    """One line of a record check's evidence in ``locale`` (as written when the catalog does
    not know it)."""
    if locale != "zh-CN":
        return evidence
    cat = catalog()
    templates = cat["check"].get(cid, {}).get("evidence", [])
    said = _translate(templates + cat["text"], evidence, True, {})
    return evidence if said is None else said


# --- amounts --------------------------------------------------------------------------------------


def size_text(n: int | float) -> str:
    """Bytes for people: ``1.2 GiB``, ``512 MiB``, ``300 B`` (three significant digits)."""
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{int(n)} B"


#: the parts of a Task's Ray node summary, per locale: (cpus, gpus, memory, object store,
#: worker ports, a custom resource) -> text
_NODE_PARTS: dict[str, dict[str, Callable[..., str]]] = {
    "en": {"cpus": lambda n: f"{n:g} CPU{'s' if n != 1 else ''}",
           "gpus": lambda n: f"{n:g} GPU{'s' if n != 1 else ''}",
           "memory": lambda b: f"{size_text(b)} memory",
           "store": lambda b: f"{size_text(b)} object store",
           "ports": lambda n: f"{n} worker ports",
           "device": lambda k, v: f"{v:g} {k}"},
    "zh-CN": {"cpus": lambda n: f"{n:g} 个 CPU",
              "gpus": lambda n: f"{n:g} 个 GPU",
              "memory": lambda b: f"内存 {size_text(b)}",
              "store": lambda b: f"对象存储 {size_text(b)}",
              "ports": lambda n: f"{n} 个工作进程端口",
              "device": lambda k, v: f"{v:g} 个 {k}"},
}


def ray_node_text(view: dict[str, Any] | None, locale: str) -> str:
    """One line for what each Worker of a role tells ``ray start``
    (:func:`rlark.runtimes.base.ray_node_view`: ``cpus``, ``gpus``, ``memoryBytes``,
    ``objectStoreBytes``, ``workerPorts``, ``devices``) in ``locale``: ``1 CPU, 1 GiB memory,
    307 MiB object store, 48 worker ports``. Empty for no view."""
    if not view:
        return ""
    part = _NODE_PARTS.get(locale, _NODE_PARTS["en"])
    out = []
    if view.get("cpus") is not None:
        out.append(part["cpus"](view["cpus"]))
    if view.get("gpus"):
        out.append(part["gpus"](view["gpus"]))
    if view.get("memoryBytes") is not None:
        out.append(part["memory"](view["memoryBytes"]))
    if view.get("objectStoreBytes") is not None:
        out.append(part["store"](view["objectStoreBytes"]))
    if view.get("workerPorts") is not None:
        out.append(part["ports"](view["workerPorts"]))
    for k, v in sorted((view.get("devices") or {}).items()):
        if v:
            out.append(part["device"](k, v))
    return ("，" if locale == "zh-CN" else ", ").join(out)
