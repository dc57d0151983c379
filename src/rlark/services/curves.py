"""A Run's training curves: the scalars RLinf's ``MetricLogger`` writes as TensorBoard event
files, read where the Run's runtime lets the server look, for ``GET .../runs/{n}/scalars``,
``rlark metrics`` and the console's charts. (Not :mod:`rlark.services.metrics`: that is the
server's own Prometheus ``/metrics``.)

Where RLinf writes them (RLinf ``rlinf/utils/metric_logger.py``, ``MetricLogger``, at commit
a3816b5 of github.com/RLinf/RLinf): ``runner.logger.logger_backends`` (default
``["tensorboard"]``) holding ``tensorboard`` means a ``torch.utils.tensorboard.SummaryWriter``
on ``<runner.logger.log_path>/tensorboard`` (``log_path`` default ``logs``), or on
``.../tensorboard/all`` with ``runner.per_worker_log``; the runner on the head logs one scalar
per metric and step (``rollout/rewards``, ``env/success_once``, ``train/actor/policy_loss``,
``time/...``). RLark takes those keys from the Run's resolved config (its record's, else RLark's
own composition of the config the Run names) and never rewrites the user's config.

Where the server reads them: the head Worker's directory where the runtime lets it look (the
local runtime), and the bucket of an ``objectStorage`` mount holding the directory on every
runtime (:mod:`rlark.services.curves_bucket`): the bucket once the Run's Workers have ended,
the Worker's directory first while they run. A Pod's own files (Kubernetes: its container, a
``hostPath`` or ``pvc`` volume) are out of the server's reach; the why says to put
``runner.logger.log_path`` on an ``objectStorage`` mount.

The event files are the workload's: untrusted input. Only files named ``events.out.tfevents.*``
directly in that directory are read, opened without following symbolic links (every component of
the directory's real path opened with ``O_NOFOLLOW``, so a link swapped in after the check leads
nowhere), at most :data:`MAX_FILES` files and :data:`MAX_FILE_BYTES` bytes of each; at most
:data:`MAX_TAGS` tags of :data:`MAX_TAG_CHARS` characters and :data:`MAX_POINTS` points per tag
are kept (evenly thinned beyond). A file that does not parse is a note, never an error.

The reader: the ``tensorboard`` package (the format's owner) decodes each record as its
``Event`` protocol buffer and turns legacy ``simple_value`` scalars and TF2 scalar tensors alike
into one value (``data_compat.migrate_value``, ``tensor_util.make_ndarray``). Its own record
reader (``event_file_loader``) checks each record's CRC32C in pure Python without TensorFlow
(measured: 0.29 MB/s, 10.5 s for a 3 MB file of 200,000 scalars), so the records' framing
(TFRecord: little-endian uint64 length, its masked CRC32C, the data, the data's masked CRC32C;
tensorflow/core/lib/io/record_writer.cc) is read here, each length checked against its CRC with
tensorboard's ``masked_crc32c`` and against the bytes left; the data's CRC is not recomputed
(a workload can write valid CRCs anyway; a torn record fails to decode or is cut by its length).
"""

from __future__ import annotations

import math
import os
import re
import stat as stat_module
import struct
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable, Iterator, Mapping

#: the metrics the console shows first when the Run has them (RLinf's key ones, issue 25)
KEY_METRICS = ("rollout/rewards", "env/success_once", "env/return", "train/actor/policy_loss",
               "train/actor/grad_norm")
#: what RLinf's SummaryWriter (torch's, tensorboard's EventFileWriter) names its files
EVENT_PREFIX = "events.out.tfevents."
MAX_FILES = 32
MAX_FILE_BYTES = 64 * 1024 * 1024
MAX_TAGS = 300
MAX_TAG_CHARS = 200
MAX_POINTS = 5000
#: seconds an event file may be named before the Run's creation and still be the Run's (clocks)
SLACK = 5.0
_LENGTH = struct.Struct("<Q")
_CRC = struct.Struct("<I")


class EventFileError(ValueError):
    """An event file that is not one (the message names the byte offset and why)."""


def records(data: bytes) -> Iterator[bytes]:
    """The records of the TFRecord bytes ``data``, in order; a record cut short at the end (a
    writer mid-flush) ends the iteration. Pure.

    Raises:
        EventFileError: a length whose CRC does not match (not an event file, or corrupt).
    """
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

    pos = 0
    while pos + 12 <= len(data):
        header = data[pos:pos + 8]
        (crc,) = _CRC.unpack_from(data, pos + 8)
        if masked_crc32c(header) != crc:
            raise EventFileError(f"byte {pos}: a record's length fails its CRC32C (not a "
                                 "TensorBoard event file, or a corrupt one)")
        (length,) = _LENGTH.unpack(header)
        if pos + 12 + length + 4 > len(data):
            return
        yield data[pos + 12:pos + 12 + length]
        pos += 12 + length + 4


@dataclass
class _Series:
    """One tag's points as read: every ``stride``-th point kept, the last one always."""

    kept: list[tuple[int, float | None]] = field(default_factory=list)
    seen: int = 0
    stride: int = 1
    last: tuple[int, float | None] | None = None

    def add(self, step: int, value: float | None) -> None:
        if self.seen % self.stride == 0:
            self.kept.append((step, value))
            if len(self.kept) >= 2 * MAX_POINTS:
                self.kept = self.kept[::2]
                self.stride *= 2
        self.seen += 1
        self.last = (step, value)

    def points(self) -> list[list[Any]]:
        """``[[step, value], ...]`` by step; a step written more than once (a resumed writer)
        keeps its last value; at most :data:`MAX_POINTS`, evenly spaced, the last one kept."""
        by_step: dict[int, float | None] = {}
        for step, value in self.kept + ([self.last] if self.last else []):
            by_step[step] = value
        steps = sorted(by_step)
        if len(steps) > MAX_POINTS:
            every = len(steps) / MAX_POINTS
            steps = [steps[int(i * every)] for i in range(MAX_POINTS - 1)] + [steps[-1]]
        return [[s, by_step[s]] for s in steps]


@dataclass
class Scalars:
    """What event files held: tag -> series, and notes on what was left out."""

    series: dict[str, _Series] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    tags_left_out: int = 0

    def add_events(self, blobs: Iterator[bytes], name: str) -> None:
        """Decode each record as an ``Event`` and keep its scalar values (legacy
        ``simple_value`` or a TF2 scalars-plugin tensor, whose metadata only the tag's first
        value carries). A record that does not decode is a note and ends this file."""
        from tensorboard import data_compat
        from tensorboard.compat.proto import event_pb2
        from tensorboard.util import tensor_util

        scalar_tags: set[str] = set()
        try:
            for blob in blobs:
                event = event_pb2.Event.FromString(blob)
                if not event.HasField("summary"):
                    continue
                for value in event.summary.value:
                    if value.WhichOneof("value") == "simple_value":
                        # what migrate_value would make of it (a float32 scalar of the scalars
                        # plugin), read directly: building and reading back a tensor per value
                        # cost 7 s for 100,000 values (bench/console_charts.py)
                        scalar_tags.add(value.tag)
                        self._add_value(value.tag[:MAX_TAG_CHARS], int(event.step),
                                        float(value.simple_value))
                        continue
                    v = data_compat.migrate_value(value)
                    if v.metadata.plugin_data.plugin_name == "scalars":
                        scalar_tags.add(v.tag)
                    if v.tag not in scalar_tags or not v.HasField("tensor"):
                        continue
                    self._add(v.tag, int(event.step), tensor_util.make_ndarray(v.tensor))
        except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError, EventFileError, and
            # whatever else a hostile file provokes in decoding: a note, never a 500
            self.notes.append(f"{name}: {str(exc)[:200] or type(exc).__name__}; read up to there")

    def _add(self, tag: str, step: int, array: Any) -> None:
        if getattr(array, "size", 0) != 1:
            return
        self._add_value(tag[:MAX_TAG_CHARS], step, float(array.item()))

    def _add_value(self, tag: str, step: int, x: float) -> None:
        series = self.series.get(tag)
        if series is None:
            if len(self.series) >= MAX_TAGS:
                self.tags_left_out += 1
                return
            series = self.series[tag] = _Series()
        series.add(step, x if math.isfinite(x) else None)


def _file_time(name: str) -> float | None:
    """The Unix seconds an event file's name gives (``events.out.tfevents.<seconds>.<host>...``,
    as TensorBoard's EventFileWriter names it)."""
    m = re.match(re.escape(EVENT_PREFIX) + r"(\d+(?:\.\d+)?)\.", name)
    return float(m.group(1)) if m else None


def event_file_order(name: str) -> tuple:
    """The sort key that puts event files in the order they were made: their names
    (``events.out.tfevents.<seconds>.<host>.<pid>.<writer number><suffix>``, TensorBoard's
    EventFileWriter) with every run of digits compared as a number, so a process's 10th writer
    comes after its 9th and a later second after an earlier one of fewer digits. Pure."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part)
                 for part in re.split(r"(\d+)", name) if part)


def _open_dir(real: str) -> int:
    """A descriptor of directory ``real`` (absolute, links already resolved), every component
    opened with ``O_NOFOLLOW``: a link swapped in since ``real`` was resolved is refused."""
    fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in [p for p in real.split("/") if p]:
            nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except OSError:
        os.close(fd)
        raise
    return fd


class NotRead(Exception):
    """One event file that was listed but not read; the message is the note that says why."""


def read_dir(real: str, since: float | None = None, until: float | None = None) -> dict[str, Any]:
    """The scalars of the event files directly in directory ``real`` (absolute, symbolic links
    resolved) as :func:`read_files` gives them. Bounded as the module says; never follows a
    link.

    Raises:
        OSError: the directory cannot be opened (missing, a link, not readable).
    """
    fd = _open_dir(real)
    try:
        names = sorted((n for n in os.listdir(fd) if n.startswith(EVENT_PREFIX)),
                       key=event_file_order)
        key = ("dir", real, tuple(_identity(n, fd) for n in names))

        def fetch(name: str) -> tuple[bytes, int]:
            try:
                ffd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
            except OSError as exc:
                raise NotRead(f"{name}: not read ({exc.strerror or exc})") from None
            with os.fdopen(ffd, "rb") as f:
                st = os.fstat(f.fileno())
                if not stat_module.S_ISREG(st.st_mode):
                    raise NotRead(f"{name}: not a regular file; not read")
                return f.read(MAX_FILE_BYTES), st.st_size

        return read_files(key, names, fetch, since, until)
    finally:
        os.close(fd)


def read_files(key: tuple, names: list[str], fetch: Callable[[str], tuple[bytes, int]],
               since: float | None = None, until: float | None = None) -> dict[str, Any]:
    """The scalars of the event files ``names`` (each named ``events.out.tfevents.*``, in the
    order they were made: :func:`event_file_order`), each read by ``fetch(name)`` -> ``(its first``
    :data:`MAX_FILE_BYTES` ``bytes, its whole size)`` or :class:`NotRead`; files named outside
    ``[since - SLACK, until + SLACK]`` (Unix seconds; None: open) left out as another Run's:
    ``{"scalars": {tag: [[step, value], ...]}, "files": [names read], "notes": [...],
    "otherRuns": count}``. ``key``: where the files are and what each is now (a name, size and
    modification time or version per file); a read with the same key, window and bounds is
    answered from memory (:data:`_READ`) without fetching."""
    key = key + (since, until, MAX_FILES, MAX_FILE_BYTES, MAX_TAGS, MAX_POINTS)
    if key in _READ:
        _READ.move_to_end(key)
        return _copy(_READ[key])
    out = Scalars()
    read: list[str] = []
    others = 0
    for name in names:
        t = _file_time(name)
        if t is not None and ((since is not None and t < since - SLACK)
                              or (until is not None and t > until + SLACK)):
            others += 1
            continue
        if len(read) >= MAX_FILES:
            out.notes.append(f"more than {MAX_FILES} event files: the first {MAX_FILES} read")
            break
        try:
            data, size = fetch(name)
        except NotRead as exc:
            out.notes.append(str(exc))
            continue
        if size > MAX_FILE_BYTES:
            out.notes.append(f"{name}: {size} bytes; its first {MAX_FILE_BYTES} read")
        read.append(name)
        out.add_events(records(data[:MAX_FILE_BYTES]), name)
    if out.tags_left_out:
        out.notes.append(f"more than {MAX_TAGS} tags: {out.tags_left_out} values of further "
                         "tags left out")
    found = {"scalars": {tag: s.points() for tag, s in sorted(out.series.items())},
             "files": read, "notes": out.notes, "otherRuns": others}
    _keep(key, found)
    return _copy(found)


#: what :func:`read_files` read, by place (a directory, a bucket's prefix), its event files'
#: identities (name, device, inode, size, modification time in ns; or an object's size, ETag and
#: time), time window and bounds: a live Run's page asks again every few
#: seconds and a file that did not change is not decoded again (10 tags x 10,000 points: 0.6 s)
_READ: "OrderedDict[tuple, dict[str, Any]]" = OrderedDict()
#: the most points :data:`_READ` holds, all directories together (some 100 bytes each)
READ_CACHE_POINTS = 500_000


def _identity(name: str, fd: int) -> tuple:
    try:
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
    except OSError:
        return (name,)
    return (name, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _points_in(found: dict[str, Any]) -> int:
    return sum(len(p) for p in found["scalars"].values())


def _keep(key: tuple, found: dict[str, Any]) -> None:
    if _points_in(found) > READ_CACHE_POINTS:
        return
    _READ[key] = found
    while sum(_points_in(f) for f in _READ.values()) > READ_CACHE_POINTS:
        _READ.popitem(last=False)


def _copy(found: dict[str, Any]) -> dict[str, Any]:
    """``found`` with its own dicts and lists (the points, never changed by a reader, shared)."""
    return {"scalars": dict(found["scalars"]), "files": list(found["files"]),
            "notes": list(found["notes"]), "otherRuns": found["otherRuns"]}


@dataclass(frozen=True)
class LoggerDir:
    """Where RLinf writes the Run's event files (``path``: absolute, as the head saw it), or why
    that is not known (``path`` None, ``why``)."""

    path: str | None
    why: str = ""
    key: str = "runner.logger.log_path"


def tensorboard_dir(config: Mapping[str, Any] | None, working_dir: str | None) -> LoggerDir:
    """The directory RLinf's MetricLogger writes TensorBoard event files to, from the Run's
    resolved config ``config`` (plain data) and the Job's ``spec.workingDir`` (the run script's
    working directory, where a relative ``log_path`` starts). Pure."""
    if not isinstance(config, Mapping):
        return LoggerDir(None, "the Run's resolved RLinf config is not known (spec.rlinf names "
                               "no config, or it could not be composed)")
    runner: Any = config.get("runner")
    runner = runner if isinstance(runner, Mapping) else {}
    logger: Any = runner.get("logger")
    logger = logger if isinstance(logger, Mapping) else {}
    backends = logger.get("logger_backends", ["tensorboard"])
    backends = [backends] if isinstance(backends, str) else list(backends or [])
    if "tensorboard" not in backends:
        return LoggerDir(None, f"runner.logger.logger_backends is {backends}: RLinf writes no "
                               "TensorBoard event files for this Run")
    log_path = logger.get("log_path", "logs")
    if not isinstance(log_path, str) or not log_path.strip() or "${" in log_path:
        return LoggerDir(None, f"runner.logger.log_path is {log_path!r}, not a path RLark can "
                               "resolve")
    if not os.path.isabs(log_path):
        if not working_dir:
            return LoggerDir(None, f"runner.logger.log_path {log_path!r} is relative and the Job "
                                   "sets no spec.workingDir to start it from")
        log_path = os.path.join(working_dir, log_path)
    parts = [log_path, "tensorboard"] + (["all"] if runner.get("per_worker_log") else [])
    return LoggerDir(os.path.normpath(os.path.join(*parts)))


#: RLark's own compositions of live Runs' configs, by Run uid (a Run's spec never changes)
_COMPOSED: dict[str, dict[str, Any] | None] = {}
_COMPOSED_MAX = 64


def _config_of(rec: Mapping[str, Any], spec: dict[str, Any], profile: Any) -> Any:
    """The Run's resolved config: its record's, else RLark's own composition of the config its
    spec names (:func:`rlark.record.finish.compose_for_record`; kept per Run uid)."""
    data = ((rec.get("configs") or {}).get("resolved") or {}).get("data")
    if isinstance(data, Mapping):
        return data
    uid = str(rec.get("runUid"))
    if uid not in _COMPOSED:
        from rlark.record.finish import compose_for_record

        if len(_COMPOSED) >= _COMPOSED_MAX:
            _COMPOSED.pop(next(iter(_COMPOSED)))
        _COMPOSED[uid] = compose_for_record(spec, profile)
    return (_COMPOSED[uid] or {}).get("data")


def _epoch(iso: Any) -> float | None:
    try:
        return datetime.fromisoformat(iso).timestamp() if isinstance(iso, str) else None
    except ValueError:
        return None


def run_scalars(jobs: Any, name: str, run: int | None, project: str,
                tags: list[str] | None = None) -> dict[str, Any]:
    """The scalars of a Run (default: the current one) of Job ``name``: ``{"job", "run",
    "phase", "scalars": {tag: [[step, value], ...]}, "tags": [every tag found], "path": the
    directory looked at (in the head Worker) or None, "at": where the server read it (a
    directory here, or ``s3://bucket/prefix`` of the mount that holds it) or None, "files",
    "notes", "otherRuns", "why": None | why there is nothing}``. ``tags``: only these
    (default: all). Steps are the writer's ``global_step`` (ints), values floats (None: NaN or
    infinite).

    Raises:
        NotFound: no such Job or Run.
    """
    from rlark.services.secrets import mask_data

    rec, phase, sandboxed, mask = jobs.record_for_curves(name, run, project)
    out = _scalars_of(rec, phase, sandboxed, name, tags,
                      lambda: jobs.mount_keys(name, rec.get("run"), project))
    scalars = out.pop("scalars")
    shown = mask_data(out, mask)
    # the points are numbers: only the tags (the workload's text) go through the mask; walking
    # 50,000 points did cost 0.65 s (bench/console_charts.py)
    shown["scalars"] = {mask(tag): points for tag, points in scalars.items()}
    return shown


def _scalars_of(rec: dict[str, Any], phase: str, sandboxed: bool, name: str,
                tags: list[str] | None,
                keys: Callable[[], Mapping[tuple[str, str], str] | None] = dict
                ) -> dict[str, Any]:
    """:func:`run_scalars` of the unmasked record ``rec``; ``keys``: opens the Run's secrets
    (``(secret, key)`` -> value, None: not at hand), called only to read a bucket."""
    from rlark import runtimes

    out: dict[str, Any] = {"job": name, "run": rec.get("run"), "phase": phase, "scalars": {},
                           "tags": [], "path": None, "at": None, "files": [], "notes": [],
                           "otherRuns": 0, "why": None}
    try:
        profile = runtimes.profile(str(rec.get("runtime")))
    except ValueError:
        out["why"] = f"runtime {rec.get('runtime')!r} is not one this server knows"
        return out
    where = tensorboard_dir(_config_of(rec, rec.get("spec") or {}, profile), rec.get("workingDir"))
    out["path"] = where.path
    if where.path is None:
        out["why"] = where.why
        return out
    tried = _read_places(rec, profile, where.path, sandboxed, keys)
    # the first place with files, else the first place; the others' whys are notes
    pick = next((i for i, t in enumerate(tried) if t[1] is not None and t[1]["files"]), 0)
    at, found, why = tried[pick]
    out["at"] = at
    out["notes"] = [t[2] for i, t in enumerate(tried) if i != pick]
    if found is None:
        out["why"] = why
        return out
    out["notes"] += found["notes"]
    out.update(files=found["files"], otherRuns=found["otherRuns"], tags=list(found["scalars"]))
    wanted = set(tags) if tags else None
    out["scalars"] = {t: p for t, p in found["scalars"].items() if wanted is None or t in wanted}
    if not found["files"]:
        out["why"] = why
    return out


def _read_places(rec: dict[str, Any], profile: Any, path: str, sandboxed: bool,
                 keys: Callable[[], Mapping[tuple[str, str], str] | None]
                 ) -> list[tuple[str | None, dict[str, Any] | None, str]]:
    """Each place the event files of directory ``path`` (in the head Worker) may be read,
    read in order until one has files: ``[(where it is, what was found or None, why no files
    there)]``. The places: the head Worker's directory where the runtime lets the server see
    it (:meth:`~rlark.runtimes.base.RuntimeProfile.worker_dir`), and the bucket of the
    ``objectStorage`` mount that holds ``path`` (:mod:`rlark.services.curves_bucket`): the
    bucket first once the Run's Workers have all ended (what they wrote is kept there), the
    Worker's directory first while they run (the bucket gets the files at the end)."""
    from rlark import settings
    from rlark.record.outputs import ReadBackError
    from rlark.services.curves_bucket import NOT_YET, bucket_dir, bucket_scalars

    times = rec.get("times") or {}
    since, until = _epoch(times.get("created")), _epoch(times.get("finished"))
    live = bool(rec.get("provisional"))
    places: list[tuple[str, str, Callable[[], dict[str, Any]]]] = []
    real, what = profile.worker_dir(rec, path, 0, sandboxed)
    if real is not None:
        places.append((real, what, lambda: read_dir(real, since, until)))
    try:
        bucket = bucket_dir(rec.get("spec") or {}, path)
    except ValueError as exc:
        bucket, what = None, f"{what}; its objectStorage mount's source is not read: {exc}"
    if bucket is not None:
        try:
            allowed = settings.object_storage_allow_networks()
        except ValueError:
            allowed = []
        holder = bucket

        def from_bucket() -> dict[str, Any]:
            return bucket_scalars(holder, keys(), allowed, since, until)

        mount = f"objectStorage mount {bucket.mount.get('name')}"
        places.insert(len(places) if live else 0, (bucket.at, mount, from_bucket))
    if not places:
        return [(None, None, f"no event files readable by the server for this Run: {what}; "
                             "put runner.logger.log_path on an objectStorage mount of the head "
                             "role to have the server read them from its bucket")]
    tried: list[tuple[str | None, dict[str, Any] | None, str]] = []
    for at, kind, read in places:
        try:
            found = read()
        except (OSError, ReadBackError) as exc:
            err = (exc.strerror or str(exc)) if isinstance(exc, OSError) else str(exc)
            tried.append((at, None, f"no event files for this Run: {path} ({kind}, {at}) "
                                    f"cannot be read: {err}"))
            continue
        why = f"no event files for this Run in {path} ({kind}, {at})" + (
            f"; {found['otherRuns']} there are other Runs'" if found["otherRuns"] else "")
        if at.startswith("s3://") and live:
            why += f"; {NOT_YET}"
        tried.append((at, found, why))
        if found["files"]:
            break
    return tried
