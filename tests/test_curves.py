"""Reading a Run's training curves (issue 25, item 2; services/curves.py): event files written
by tensorboard's own writer read back point for point, in both scalar encodings; where RLinf
writes them, from the Run's config; and the event files as the hostile input they are: bounded,
never through a symbolic link, garbage a note and never an exception."""

from __future__ import annotations

import os

import pytest

from rlark.runtimes.kubernetes.profile import KubernetesProfile
from rlark.runtimes.local.outputs import server_dir
from rlark.services import curves
from rlark.services.curves import EventFileError, read_dir, records, tensorboard_dir
from tests.curves_data import POINTS, write_events


def expected(points=POINTS) -> dict[str, list[list]]:
    out: dict[str, list[list]] = {}
    for step, values in points.items():
        for tag, value in values.items():
            out.setdefault(tag, []).append([step, value])
    return out


def test_scalars_written_by_tensorboards_writer_are_read_point_for_point(tmp_path):
    f = write_events(tmp_path, tensors=["time/step"])  # one tag as a TF2 scalar tensor
    got = read_dir(str(tmp_path))
    assert got["scalars"] == expected()
    assert got["files"] == [f.name] and got["notes"] == [] and got["otherRuns"] == 0


def test_files_are_read_in_order_and_a_rewritten_step_keeps_its_last_value(tmp_path):
    write_events(tmp_path, {0: {"a": 1.0}, 1: {"a": 2.0}}, suffix=".1")
    write_events(tmp_path, {1: {"a": 5.0}, 2: {"a": float("nan")}}, suffix=".2")  # resumed
    assert read_dir(str(tmp_path))["scalars"] == {"a": [[0, 1.0], [1, 5.0], [2, None]]}


def test_files_named_outside_the_runs_time_are_another_runs(tmp_path):
    f = write_events(tmp_path, {0: {"a": 1.0}})
    t = float(f.name.split(".")[3])
    assert read_dir(str(tmp_path), since=t + 60)["otherRuns"] == 1
    assert read_dir(str(tmp_path), until=t - 60)["scalars"] == {}
    assert read_dir(str(tmp_path), since=t - 1, until=t + 1)["scalars"] == {"a": [[0, 1.0]]}


def test_garbage_and_a_torn_last_record_are_notes_not_errors(tmp_path):
    good = write_events(tmp_path, {0: {"a": 1.0}, 1: {"a": 2.0}})
    data = good.read_bytes()
    (tmp_path / "events.out.tfevents.1.host.1.0").write_bytes(b"\x00garbage" * 100)
    torn = tmp_path / "events.out.tfevents.2.host.1.0"
    torn.write_bytes(data[:-3])  # a writer mid-flush: the last record cut short
    got = read_dir(str(tmp_path), since=None)
    assert any("fails its CRC32C" in n for n in got["notes"]), got["notes"]
    assert got["scalars"]["a"] == [[0, 1.0], [1, 2.0]]
    with pytest.raises(EventFileError, match="byte 0"):
        list(records(b"\x01" * 40))


def test_a_record_whose_data_is_no_event_is_a_note(tmp_path):
    from tensorboard.summary.writer.record_writer import RecordWriter

    with open(tmp_path / "events.out.tfevents.9.h.1.0", "wb") as f:
        RecordWriter(f).write(b"\xff\xff\xff not a protocol buffer")
    got = read_dir(str(tmp_path))
    assert got["scalars"] == {} and len(got["notes"]) == 1, got


def test_points_tags_and_bytes_are_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(curves, "MAX_POINTS", 10)
    monkeypatch.setattr(curves, "MAX_TAGS", 2)
    write_events(tmp_path, {s: {"a": float(s), "b": 1.0, "c": 2.0} for s in range(1000)})
    got = read_dir(str(tmp_path))
    a = got["scalars"]["a"]
    assert set(got["scalars"]) == {"a", "b"} and len(a) == 10
    assert a[0] == [0, 0.0] and a[-1] == [999, 999.0]  # evenly thinned, first and last kept
    assert all(x[0] < y[0] for x, y in zip(a, a[1:]))
    assert any("more than 2 tags" in n for n in got["notes"])
    monkeypatch.setattr(curves, "MAX_FILE_BYTES", 2000)
    cut = read_dir(str(tmp_path))
    assert any("its first 2000 read" in n for n in cut["notes"])
    assert 0 < len(cut["scalars"]["a"]) and cut["scalars"]["a"][-1][0] < 999


def test_no_symbolic_link_is_followed(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    secret = write_events(elsewhere, {0: {"secret": 42.0}})
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    os.symlink(secret, run_dir / "events.out.tfevents.5.h.1.0")  # a file link
    got = read_dir(str(run_dir))
    assert got["scalars"] == {} and got["files"] == [] and "not read" in got["notes"][0]
    os.symlink(elsewhere, tmp_path / "linked")  # a directory link, even one resolved late
    with pytest.raises(OSError):
        read_dir(str(tmp_path / "linked"))


def test_the_server_reads_a_workers_directory_only_inside_its_place(tmp_path, rlark_home):
    work = tmp_path / "work"
    (work / "results").mkdir(parents=True)
    rec = {"runUid": "u1", "workingDir": str(work), "spec": {"spec": {"roles": []}},
           "workers": {"items": [{"nodeRank": 0, "role": "head"}]}}
    real, what = server_dir(rec, str(work / "results"), 0, sandboxed=False)
    assert real == str(work / "results") and "file system" in what
    # a sandboxed Worker's write below the working directory is in its overlay's upper dir
    from rlark import settings
    from rlark.runtimes.local.sandbox import worker_dirs

    dirs = worker_dirs(str(settings.rlark_home()), settings.ray_tmp_root(), "u1", 0)
    upper = os.path.join(dirs.upper, "results")
    os.makedirs(upper)
    assert server_dir(rec, str(work / "results"), 0, sandboxed=True)[0] == upper
    os.rmdir(upper)
    os.symlink("/etc", upper)  # the workload's link out of its own place
    real, why = server_dir(rec, str(work / "results"), 0, sandboxed=True)
    assert real is None and "symbolic link out of" in why


def test_kubernetes_says_the_path_is_in_the_pods_filesystem():
    real, why = KubernetesProfile().worker_dir({}, "/results/tensorboard", 0, False)
    assert real is None and why == ("/results/tensorboard lies in the Pod's filesystem, which "
                                    "the server cannot read")


@pytest.mark.parametrize("config, working_dir, path, why", [
    ({"runner": {"logger": {"log_path": "/r"}}}, None, "/r/tensorboard", ""),
    ({"runner": {"logger": {"log_path": "../results"}}}, "/w/x", "/w/results/tensorboard", ""),
    ({"runner": {}}, "/w", "/w/logs/tensorboard", ""),  # RLinf's default log_path: logs
    ({"runner": {"per_worker_log": True, "logger": {"log_path": "/r"}}}, None,
     "/r/tensorboard/all", ""),
    ({"runner": {"logger": {"log_path": "/r", "logger_backends": ["wandb"]}}}, None, None,
     "runner.logger.logger_backends is ['wandb']: RLinf writes no TensorBoard event files"),
    ({"runner": {"logger": {"log_path": "logs"}}}, None, None, "is relative and the Job sets no"),
    ({"runner": {"logger": {"log_path": "${oc.env:OUT}"}}}, "/w", None, "not a path RLark"),
    (None, "/w", None, "resolved RLinf config is not known"),
])
def test_where_rlinf_writes_its_event_files(config, working_dir, path, why):
    got = tensorboard_dir(config, working_dir)
    assert got.path == path and why in got.why


def test_an_event_file_that_did_not_change_is_not_decoded_again(tmp_path):
    """A live Run's page asks every few seconds: an unchanged file (same name, inode, size and
    modification time) is the same points without decoding it again; a change is read anew."""
    f = write_events(tmp_path)
    first = read_dir(str(tmp_path))
    st = f.stat()
    f.write_bytes(b"\0" * st.st_size)  # same size, same inode: only its time tells
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert read_dir(str(tmp_path)) == first and first["notes"] == []
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    again = read_dir(str(tmp_path))
    assert again["scalars"] == {} and again["notes"], again


def test_a_writers_tenth_file_comes_after_its_ninth():
    """EventFileWriter numbers a process's writers (``...<pid>.<n><suffix>``): by name alone
    "10" sorts before "9" and a resumed step would keep the older value."""
    from rlark.services.curves import event_file_order

    names = ["events.out.tfevents.1700000000.h.77.10.2", "events.out.tfevents.1700000000.h.77.9.1",
             "events.out.tfevents.999999999.h.1000.0", "events.out.tfevents.1700000001.h.5.0"]
    assert sorted(names, key=event_file_order) == [
        "events.out.tfevents.999999999.h.1000.0", "events.out.tfevents.1700000000.h.77.9.1",
        "events.out.tfevents.1700000000.h.77.10.2", "events.out.tfevents.1700000001.h.5.0"]
