"""The Create Job wizard: what its form holds, how that becomes a Job document, and which
Findings belong to which of its four steps.

The form keeps the text the user typed (``WizardState``: strings only), so every re-render shows
exactly that. :meth:`WizardState.to_document` turns it into a Job mapping; text that cannot be a
number becomes a Finding with the field's spec path (the field is left out, so the rest of the
document is still checked). The value rules are never repeated here: they are
:func:`rlark.preflight.check_job` and :meth:`rlark.services.jobs.JobService.preflight`, reached
through the service.

Steps: 1 name, labels and roles (with the head role); 2 each role's Worker settings; 3 the shared
settings (run script, working dir, RLinf config, failure policy); 4 review (YAML, node ranks,
every Finding of the preflight). Which step a Finding belongs to: :mod:`.wizard_steps`; the
review step's YAML and placement: :mod:`.wizard_review`.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Iterable

from rlark.findings import Finding
from rlark.spec import API_VERSION, KIND, MAX_NAME_LENGTH

STEPS = (1, 2, 3, 4)
MAX_ROLES = 64
MAX_ROWS = 200  # env, mounts, selector, devices, labels per list
MOUNT_TYPES = ("hostPath", "pvc", "objectStorage")
DEFAULTS = {"join_timeout": "300", "prepare_timeout": "1800", "unresponsive_timeout": "300",
            "max_restarts": "0", "grace": "10"}

#: the fields the wizard shows; anything else in a Job it is given (fields added to the spec later,
#: runtime-specific settings) rides along unchanged in hidden "extra" fields
KNOWN = {
    "metadata": {"name", "labels"},
    "spec": {"headRole", "runScript", "workingDir", "rlinf", "failurePolicy",
             "terminationGracePeriodSeconds", "roles"},
    "rlinf": {"configDir", "configName", "overrides"},
    "failurePolicy": {"joinTimeoutSeconds", "prepareTimeoutSeconds", "unresponsiveTimeoutSeconds",
                      "maxRestarts"},
    "role": {"name", "workers", "image", "resources", "prepareScript", "env", "mounts",
             "nodeSelector", "local"},
    "resources": {"cpu", "memory", "gpu", "devices"},
    "local": {"python"},
    "mount": {"name", "type", "source", "mountPath", "readOnly", "kubernetes"},
    "mountKubernetes": {"storageClass", "csiDriver", "size"},
}


def _rest(data: Any, kind: str) -> dict[str, Any]:
    """The keys of mapping ``data`` that the wizard does not show."""
    return {k: v for k, v in data.items() if k not in KNOWN[kind]} if isinstance(data, dict) else {}


def _pack(parts: dict[str, dict]) -> str:
    parts = {k: v for k, v in parts.items() if v}
    return json.dumps(parts, sort_keys=True, ensure_ascii=False) if parts else ""


def _unpack(text: str) -> dict[str, dict]:
    try:
        data = json.loads(text) if text else {}
    except ValueError:
        return {}
    return {k: v for k, v in data.items() if isinstance(v, dict)} if isinstance(data, dict) else {}


@dataclass
class KV:
    key: str = ""
    value: str = ""
    #: env rows only: ``secret/key`` of a ``valueFrom.secretKeyRef`` (never the secret's value)
    secret: str = ""

    def blank(self) -> bool:
        return not self.key.strip() and not self.value.strip() and not self.secret.strip()

    def env_entry(self) -> dict[str, Any]:
        """The ``env`` item of this row: a value, or ``valueFrom.secretKeyRef`` from ``secret``
        (``name/key``); both when both are filled in, for preflight to refuse."""
        entry: dict[str, Any] = {"name": self.key}
        if self.secret.strip():
            name, _, key = self.secret.strip().partition("/")
            entry["valueFrom"] = {"secretKeyRef": {"name": name.strip(), "key": key.strip()}}
            if self.value:
                entry["value"] = self.value
        else:
            entry["value"] = self.value
        return entry


def _env_row(e: object) -> KV:
    if not isinstance(e, dict):  # not an env entry (the spec's checks name it)
        return KV("", "", "")
    ref = (e.get("valueFrom") or {}).get("secretKeyRef") or {}
    secret = f"{ref.get('name', '')}/{ref.get('key', '')}" if ref else ""
    return KV(e.get("name", ""), e.get("value") or "", secret)


@dataclass
class MountRow:
    name: str = ""
    type: str = "hostPath"
    source: str = ""
    path: str = ""
    read_only: bool = False
    # objectStorage on Kubernetes (spec Mount.kubernetes): a PVC of a StorageClass, or a CSI driver
    storage_class: str = ""
    csi_driver: str = ""
    size: str = ""
    extra: str = ""  # JSON: {"mount"|"mountKubernetes": {...}} fields the wizard does not show

    def blank(self) -> bool:
        return not any(v.strip() for v in (self.name, self.source, self.path, self.storage_class,
                                           self.csi_driver, self.size))

    def kubernetes(self) -> dict[str, Any]:
        """``mounts[].kubernetes`` of this row: the fields shown, over those kept in ``extra``."""
        k8s = dict(_unpack(self.extra).get("mountKubernetes", {}))
        for key, value in (("storageClass", self.storage_class), ("csiDriver", self.csi_driver),
                           ("size", self.size)):
            if value.strip():
                k8s[key] = value.strip()
        return k8s


def _mount_row(m: dict) -> MountRow:
    given = m.get("kubernetes")
    k8s = given if isinstance(given, dict) else {}
    return MountRow(m.get("name", ""), m.get("type", "hostPath"), m.get("source", ""),
                    m.get("mountPath", ""), bool(m.get("readOnly", False)),
                    storage_class=_fmt(k8s.get("storageClass")), csi_driver=_fmt(k8s.get("csiDriver")),
                    size=_fmt(k8s.get("size")),
                    extra=_pack({"mount": {**_rest(m, "mount"),
                                           **({} if k8s or "kubernetes" not in m
                                              else {"kubernetes": m["kubernetes"]})},
                                 "mountKubernetes": _rest(k8s, "mountKubernetes")}))


@dataclass
class RoleForm:
    name: str = ""
    workers: str = "1"
    image: str = ""
    cpu: str = ""
    memory: str = ""
    gpu: str = "0"
    prepare: str = ""
    python: str = ""
    env: list[KV] = field(default_factory=list)
    mounts: list[MountRow] = field(default_factory=list)
    selector: list[KV] = field(default_factory=list)
    devices: list[KV] = field(default_factory=list)
    extra: str = ""  # JSON: {"role"|"resources"|"local": {...}} fields the wizard does not show

    def extra_fields(self) -> list[str]:
        """Spec fields of this role (and its mounts) that the wizard keeps but does not show."""
        more = _unpack(self.extra)
        names = [k for k in more.get("role", {})]
        names += [f"resources.{k}" for k in more.get("resources", {})]
        names += [f"local.{k}" for k in more.get("local", {})]
        for j, m in enumerate(self.mounts):
            names += [f"mounts[{j}].{k}" for k in _unpack(m.extra).get("mount", {})]
            names += [f"mounts[{j}].kubernetes.{k}" for k in _unpack(m.extra).get("mountKubernetes", {})]
        return names


@dataclass
class WizardState:
    name: str = ""
    head: int = 0  # index into roles
    roles: list[RoleForm] = field(default_factory=list)
    labels: list[KV] = field(default_factory=list)
    run_script: str = ""
    working_dir: str = ""
    config_dir: str = ""
    config_name: str = ""
    overrides: str = ""  # one Hydra override per line
    join_timeout: str = DEFAULTS["join_timeout"]
    prepare_timeout: str = DEFAULTS["prepare_timeout"]
    unresponsive_timeout: str = DEFAULTS["unresponsive_timeout"]
    max_restarts: str = DEFAULTS["max_restarts"]
    grace: str = DEFAULTS["grace"]
    step: int = 1
    tab: int = 0  # the role shown in step 2
    mode: str = "create"  # create | edit
    original: str = ""  # edit: the Job being replaced
    extra: str = ""  # JSON: {"metadata"|"spec"|"rlinf"|"failurePolicy": {...}} not shown
    #: the Job file the wizard was started from (its text, and the directory its relative
    #: paths are resolved against): the review shows it as written while the form still
    #: describes it (:func:`yaml_preview`)
    source: str = ""
    source_base: str = ""

    def extra_fields(self) -> list[str]:
        """Job-level spec fields the wizard keeps but does not show."""
        more = _unpack(self.extra)
        prefix = {"metadata": "metadata.", "spec": "spec.", "rlinf": "spec.rlinf.",
                  "failurePolicy": "spec.failurePolicy."}
        return [prefix[part] + k for part in prefix for k in more.get(part, {})]

    @classmethod
    def new(cls) -> "WizardState":
        return cls(roles=[RoleForm(name="head")])

    # --- form <-> state -------------------------------------------------------------------------

    @classmethod
    def from_form(cls, pairs: Iterable[tuple[str, str]]) -> "WizardState":
        """Read the wizard's form fields (see ``templates/wizard.html`` for the names)."""
        form: dict[str, str] = {}
        for k, v in pairs:
            form.setdefault(k, v)
        st = cls(
            name=form.get("name", "").strip(),
            run_script=form.get("runScript", ""),
            working_dir=form.get("workingDir", "").strip(),
            config_dir=form.get("rlinfConfigDir", "").strip(),
            config_name=form.get("rlinfConfigName", "").strip(),
            overrides=form.get("rlinfOverrides", ""),
            join_timeout=form.get("joinTimeout", "").strip(),
            prepare_timeout=form.get("prepareTimeout", "").strip(),
            unresponsive_timeout=form.get("unresponsiveTimeout", "").strip(),
            max_restarts=form.get("maxRestarts", "").strip(),
            grace=form.get("grace", "").strip(),
            step=_clamp(_to_int(form.get("step")) or 1, 1, 4),
            tab=max(_to_int(form.get("tab")) or 0, 0),
            mode="edit" if form.get("mode") == "edit" else "create",
            original=form.get("original", "").strip(),
            extra=form.get("extra", ""),
            source=form.get("source", ""),
            source_base=form.get("sourceBase", "").strip(),
        )
        head = _to_int(form.get("head"))
        st.head = head if head is not None else -1
        for i in _indices(form, r"role-(\d+)-", MAX_ROLES):
            p = f"role-{i}-"
            role = RoleForm(
                name=form.get(p + "name", "").strip(),
                workers=form.get(p + "workers", "").strip(),
                image=form.get(p + "image", "").strip(),
                cpu=form.get(p + "cpu", "").strip(),
                memory=form.get(p + "memory", "").strip(),
                gpu=form.get(p + "gpu", "").strip(),
                prepare=form.get(p + "prepare", ""),
                python=form.get(p + "python", "").strip(),
                extra=form.get(p + "extra", ""),
            )
            for j in _indices(form, re.escape(p) + r"env-(\d+)-", MAX_ROWS):
                role.env.append(KV(form.get(f"{p}env-{j}-name", "").strip(),
                                   form.get(f"{p}env-{j}-value", ""),
                                   form.get(f"{p}env-{j}-secret", "").strip()))
            for j in _indices(form, re.escape(p) + r"mount-(\d+)-", MAX_ROWS):
                q = f"{p}mount-{j}-"
                kind = form.get(q + "type", "hostPath")
                role.mounts.append(MountRow(
                    name=form.get(q + "name", "").strip(),
                    type=kind if kind in MOUNT_TYPES else "hostPath",
                    source=form.get(q + "source", "").strip(),
                    path=form.get(q + "path", "").strip(),
                    read_only=bool(form.get(q + "ro")),
                    storage_class=form.get(q + "sc", "").strip(),
                    csi_driver=form.get(q + "csi", "").strip(),
                    size=form.get(q + "size", "").strip(),
                    extra=form.get(q + "extra", ""),
                ))
            for j in _indices(form, re.escape(p) + r"sel-(\d+)-", MAX_ROWS):
                role.selector.append(KV(form.get(f"{p}sel-{j}-key", "").strip(),
                                        form.get(f"{p}sel-{j}-value", "").strip()))
            for j in _indices(form, re.escape(p) + r"dev-(\d+)-", MAX_ROWS):
                role.devices.append(KV(form.get(f"{p}dev-{j}-key", "").strip(),
                                       form.get(f"{p}dev-{j}-value", "").strip()))
            st.roles.append(role)
        for n in _indices(form, r"label-(\d+)-", MAX_ROWS):
            st.labels.append(KV(form.get(f"label-{n}-key", "").strip(),
                                form.get(f"label-{n}-value", "").strip()))
        if not 0 <= st.head < len(st.roles):
            st.head = -1
        st.tab = min(st.tab, max(len(st.roles) - 1, 0))
        return st

    @classmethod
    def from_spec(cls, doc: dict[str, Any]) -> "WizardState":
        """The wizard filled from a Job mapping (as :func:`rlark.spec.job_to_dict` writes it)."""
        meta = doc.get("metadata") or {}
        spec = doc.get("spec") or {}
        rlinf = spec.get("rlinf") or {}
        fp = spec.get("failurePolicy") or {}
        st = cls(
            name=str(meta.get("name", "")),
            labels=[KV(str(k), str(v)) for k, v in (meta.get("labels") or {}).items()],
            run_script=spec.get("runScript", "") or "",
            working_dir=spec.get("workingDir") or "",
            config_dir=rlinf.get("configDir") or "",
            config_name=rlinf.get("configName") or "",
            overrides="\n".join(rlinf.get("overrides") or []),
            join_timeout=_fmt(fp.get("joinTimeoutSeconds", 300)),
            prepare_timeout=_fmt(fp.get("prepareTimeoutSeconds", 1800)),
            unresponsive_timeout=_fmt(fp.get("unresponsiveTimeoutSeconds", 300)),
            max_restarts=_fmt(fp.get("maxRestarts", 0)),
            grace=_fmt(spec.get("terminationGracePeriodSeconds", 10)),
            extra=_pack({"metadata": _rest(meta, "metadata"), "spec": _rest(spec, "spec"),
                         "rlinf": _rest(rlinf, "rlinf"),
                         "failurePolicy": _rest(fp, "failurePolicy")}),
        )
        for r in spec.get("roles") or []:
            res = r.get("resources") or {}
            st.roles.append(RoleForm(
                name=r.get("name", ""),
                workers=_fmt(r.get("workers", 1)),
                image=r.get("image", ""),
                cpu=_fmt(res.get("cpu")),
                memory=_fmt(res.get("memory")),
                gpu=_fmt(res.get("gpu", 0)),
                prepare=r.get("prepareScript", "") or "",
                python=(r.get("local") or {}).get("python") or "",
                env=[_env_row(e) for e in r.get("env") or []],
                mounts=[_mount_row(m) for m in r.get("mounts") or []],
                selector=[KV(str(k), str(v)) for k, v in (r.get("nodeSelector") or {}).items()],
                devices=[KV(str(k), _fmt(v)) for k, v in (res.get("devices") or {}).items()],
                extra=_pack({"role": _rest(r, "role"), "resources": _rest(res, "resources"),
                             "local": _rest(r.get("local"), "local")}),
            ))
        names = [r.name for r in st.roles]
        head = spec.get("headRole")
        st.head = names.index(head) if isinstance(head, str) and head in names else -1
        return st

    # --- actions (the wizard's buttons other than back/next/submit) -------------------------------

    def apply(self, action: str) -> bool:
        """Apply an editing action such as ``add-role``, ``remove-env:1:0`` or ``tab:2``.
        Returns False when ``action`` is not one (then it is a navigation)."""
        verb, _, rest = action.partition(":")
        args = [int(a) for a in rest.split(":") if a.isdigit()] if rest else []
        roles = self.roles

        def role(i: int) -> RoleForm | None:
            return roles[i] if 0 <= i < len(roles) else None

        if verb == "add-role":
            if len(roles) < MAX_ROLES:
                taken = {r.name for r in roles}
                name = next(f"role{n}" for n in range(1, MAX_ROLES + 2) if f"role{n}" not in taken)
                image = roles[0].image if roles else ""
                roles.append(RoleForm(name=name, image=image))
                self.tab = len(roles) - 1
            return True
        if verb == "remove-role" and args and role(args[0]) is not None:
            i = args[0]
            del roles[i]
            if self.head == i:
                self.head = 0 if roles else -1
            elif self.head > i:
                self.head -= 1
            self.tab = min(self.tab, max(len(roles) - 1, 0))
            return True
        if verb == "tab" and args:
            self.tab = _clamp(args[0], 0, max(len(roles) - 1, 0))
            return True
        lists = {"env": "env", "mount": "mounts", "sel": "selector", "dev": "devices"}
        if verb.startswith("add-") and verb[4:] in lists and args and role(args[0]) is not None:
            rows = getattr(roles[args[0]], lists[verb[4:]])
            if len(rows) < MAX_ROWS:
                rows.append(MountRow() if verb == "add-mount" else KV())
            self.tab = args[0]
            return True
        if verb.startswith("remove-") and verb[7:] in lists and len(args) == 2 and role(args[0]) is not None:
            rows = getattr(roles[args[0]], lists[verb[7:]])
            if 0 <= args[1] < len(rows):
                del rows[args[1]]
            self.tab = args[0]
            return True
        if verb == "add-label":
            if len(self.labels) < MAX_ROWS:
                self.labels.append(KV())
            return True
        if verb == "remove-label" and args:
            if 0 <= args[0] < len(self.labels):
                del self.labels[args[0]]
            return True
        return False

    # --- the Job document --------------------------------------------------------------------

    def to_document(self) -> tuple[dict[str, Any], list[Finding]]:
        """The Job mapping the form describes, and a Finding for each field whose text is not
        the number it must be (that field is left out of the mapping)."""
        bad: list[Finding] = []
        top = _unpack(self.extra)
        meta: dict[str, Any] = {**top.get("metadata", {}), "name": self.name}
        labels = {kv.key: kv.value for kv in self.labels if not kv.blank()}
        if labels:
            meta["labels"] = labels
        roles = []
        for i, r in enumerate(self.roles):
            base = f"spec.roles[{i}]"
            more = _unpack(r.extra)
            role: dict[str, Any] = {**more.get("role", {}), "name": r.name, "image": r.image}
            workers = _whole(r.workers, f"{base}.workers", bad, required=True)
            if workers is not None:
                role["workers"] = workers
            res: dict[str, Any] = dict(more.get("resources", {}))
            if r.cpu:
                res["cpu"] = _number_or_text(r.cpu)
            if r.memory:
                res["memory"] = r.memory
            gpu = _whole(r.gpu, f"{base}.resources.gpu", bad)
            if gpu is not None:
                res["gpu"] = gpu
            devices = {}
            for kv in r.devices:
                if kv.blank():
                    continue
                count = _whole(kv.value, f"{base}.resources.devices.{kv.key}", bad, required=True)
                if count is not None:
                    devices[kv.key] = count
            if devices:
                res["devices"] = devices
            if res:
                role["resources"] = res
            if r.prepare.strip():
                role["prepareScript"] = r.prepare
            env = [kv.env_entry() for kv in r.env if not kv.blank()]
            if env:
                role["env"] = env
            mounts = [
                {**_unpack(m.extra).get("mount", {}), "name": m.name, "type": m.type,
                 "source": m.source, "mountPath": m.path,
                 **({"readOnly": True} if m.read_only else {}),
                 **({"kubernetes": k8s} if (k8s := m.kubernetes()) else {})}
                for m in r.mounts if not m.blank()
            ]
            if mounts:
                role["mounts"] = mounts
            selector = {kv.key: kv.value for kv in r.selector if not kv.blank()}
            if selector:
                role["nodeSelector"] = selector
            local = dict(more.get("local", {}))
            if r.python:
                local["python"] = r.python
            if local:
                role["local"] = local
            roles.append(role)
        spec: dict[str, Any] = {
            **top.get("spec", {}),
            "headRole": self.roles[self.head].name if 0 <= self.head < len(self.roles) else "",
            "runScript": self.run_script,
        }
        if self.working_dir:
            spec["workingDir"] = self.working_dir
        overrides = [line.strip() for line in self.overrides.splitlines() if line.strip()]
        if self.config_dir or self.config_name or overrides or top.get("rlinf"):
            rlinf: dict[str, Any] = dict(top.get("rlinf", {}))
            if self.config_dir:
                rlinf["configDir"] = self.config_dir
            if self.config_name:
                rlinf["configName"] = self.config_name
            if overrides:
                rlinf["overrides"] = overrides
            spec["rlinf"] = rlinf
        fp: dict[str, Any] = dict(top.get("failurePolicy", {}))
        for key, text in (("joinTimeoutSeconds", self.join_timeout),
                          ("prepareTimeoutSeconds", self.prepare_timeout),
                          ("unresponsiveTimeoutSeconds", self.unresponsive_timeout)):
            value = _real(text, f"spec.failurePolicy.{key}", bad)
            if value is not None:
                fp[key] = value
        restarts = _whole(self.max_restarts, "spec.failurePolicy.maxRestarts", bad)
        if restarts is not None:
            fp["maxRestarts"] = restarts
        if fp:
            spec["failurePolicy"] = fp
        grace = _real(self.grace, "spec.terminationGracePeriodSeconds", bad)
        if grace is not None:
            spec["terminationGracePeriodSeconds"] = grace
        spec["roles"] = roles
        return {"apiVersion": API_VERSION, "kind": KIND, "metadata": meta, "spec": spec}, bad

    def clone_name(self) -> str:
        """A name for a copy: ``<name>-copy`` (shortened to fit)."""
        base = self.name[: MAX_NAME_LENGTH - len("-head") - len("-copy")].rstrip("-")
        return f"{base}-copy"


# --- helpers -------------------------------------------------------------------------------------


def _indices(form: dict[str, str], pattern: str, limit: int) -> list[int]:
    rx = re.compile("^" + pattern)
    found = set()
    for key in form:
        m = rx.match(key)
        if m and m.group(1).isdigit() and len(m.group(1)) < 6:
            found.add(int(m.group(1)))
    return sorted(found)[:limit]


def _to_int(text: str | None) -> int | None:
    try:
        return int(str(text).strip())
    except (TypeError, ValueError):
        return None


def _clamp(v: int, lo: int, hi: int) -> int:
    return max(lo, min(hi, v))


def _fmt(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def _number_or_text(text: str) -> float | int | str:
    try:
        v = float(text)
    except ValueError:
        return text
    if not math.isfinite(v):
        return text
    return int(v) if v.is_integer() and "." not in text and "e" not in text.lower() else v


def _whole(text: str, path: str, bad: list[Finding], required: bool = False) -> int | None:
    text = text.strip()
    if not text:
        if required:
            bad.append(Finding(code="MissingField", path=path, message=f"{path} is required",
                               hint="enter a whole number"))
        return None
    try:
        return int(text)
    except ValueError:
        bad.append(Finding(code="InvalidValue", path=path,
                           message=f"{path} = {text[:40]!r} is not a whole number",
                           hint="enter a whole number such as 1 or 2"))
        return None


def _real(text: str, path: str, bad: list[Finding]) -> float | int | None:
    text = text.strip()
    if not text:
        return None
    try:
        v = float(text)
    except ValueError:
        bad.append(Finding(code="InvalidValue", path=path,
                           message=f"{path} = {text[:40]!r} is not a number",
                           hint="enter a number of seconds such as 300"))
        return None
    return int(v) if v.is_integer() and math.isfinite(v) else v
