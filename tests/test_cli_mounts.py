"""`rlark describe`'s Mounts table and Resume line (issue 22 item 6): built from the Job document
and the Run view the API gives, pure."""

from __future__ import annotations

from rlark.cli.describe import copied, mount_rows, resume_text
from rlark.console.i18n import Translator

SPEC = {"spec": {"roles": [
    {"name": "head", "mounts": [
        {"name": "ckpt", "type": "objectStorage", "source": "s3://runs/ppo", "mountPath": "/ckpt",
         "objectStorage": {"endpoint": "https://s3.example.com", "secret": "s3"}},
        {"name": "data", "type": "hostPath", "source": "/data/sets", "mountPath": "/data",
         "readOnly": True}]},
    {"name": "pool", "workers": 2, "mounts": [
        {"name": "ckpt", "type": "objectStorage", "source": "s3://runs/ppo", "mountPath": "/ckpt",
         "kubernetes": {"storageClass": "s3-csi"}}]}]}}
WORKERS = [
    {"name": "j-head-0", "role": "head",
     "mounts": [{"name": "ckpt", "mode": "copy", "inBytes": 10, "inFiles": 1, "outBytes": 2048,
                 "outFiles": 2}]},
    {"name": "j-pool-0", "role": "pool", "mounts": []},
    {"name": "j-pool-1", "role": "pool"},
]


def test_each_roles_mounts_with_source_mode_and_what_its_workers_copied():
    rows = mount_rows(SPEC, WORKERS)
    assert [(r["role"], r["name"], r["type"], r["source"], r["path"], r["mode"]) for r in rows] == [
        ("head", "ckpt", "objectStorage", "s3://runs/ppo", "/ckpt", "copy"),
        ("head", "data", "hostPath", "/data/sets", "/data", "bind, ro"),
        ("pool", "ckpt", "objectStorage", "s3://runs/ppo", "/ckpt", "csi (StorageClass s3-csi)")]
    head_ckpt = rows[0]
    assert (head_ckpt["inBytes"], head_ckpt["outFiles"]) == (10, 2)
    en = Translator("en")
    assert copied(head_ckpt, "out", en) == "2 KiB (2 files)"
    assert copied(rows[1], "in", en) == "-"
    # the secret's name is no source, and its values are never in a Job document
    assert all("s3.example.com" not in r["source"] for r in rows)


def test_a_worker_counted_once_per_mount_and_roles_kept_apart():
    workers = [{"name": f"j-head-{i}", "role": "head",
                "mounts": [{"name": "ckpt", "mode": "copy", "outBytes": 1, "outFiles": 1}]}
               for i in range(3)]
    rows = mount_rows(SPEC, workers)
    assert rows[0]["outBytes"] == 3 and "outBytes" not in rows[2]


def test_the_resume_line_in_both_languages():
    en, zh = Translator("en"), Translator("zh-CN")
    found = {"fromRun": 2, "automatic": True, "checkpoint": "/ckpt/checkpoints/global_step_40",
             "step": 40}
    assert resume_text(found, en) == ("from run 2's checkpoint /ckpt/checkpoints/global_step_40 "
                                      "(step 40); automatic (failurePolicy.resume)")
    none = {"fromRun": 1, "automatic": False, "checkpoint": None}
    assert resume_text(none, en) == ("run 1 left no checkpoint: starts afresh; asked "
                                     "(rlark restart --resume)")
    assert resume_text(none, zh).startswith("第 1 次运行没有留下检查点")
