"""A real ``rlark server --runtime kubernetes`` on the test bed's real node, and the Jobs the
real-node tests and bench/startup_k8s.py run on it: one-Worker Jobs and the README's quickstart
(examples/quickstart) as a user has it, its directory a ``hostPath`` mount at the same path.

Why a hostPath: the test bed's node is this machine, so a directory mounted at the same path
means the same files on both runtimes (``workingDir: .`` of the quickstart's job.yaml works
unchanged), the server checks the RLinf config there (``RLARK_CONFIG_ROOTS``), and what a Run
writes (``results/``) outlives its Pods. The server's Pod policy allows that one directory
(``RLARK_K8S_HOST_PATH_PREFIXES``) and its project's namespace is labelled Pod Security
``privileged``, as docs/kubernetes.md says an administrator does to allow a hostPath.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests import waits
from tests.server import RlarkServer

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
#: bound of a one-Worker Run's wait on 2 busy cores (a Pod start, Ray's start, the run script)
WAIT = 240
#: a Worker's resources on the real node (2 CPUs in all): Ray still counts 1 CPU (rounded up)
SMALL = {"cpu": "250m", "memory": "1Gi", "objectStoreMemory": "100Mi"}


def wait_until(what: str, predicate, timeout: float = WAIT, interval: float = 0.3):
    """tests.waits.wait_until, bounded by this module's WAIT s by default."""
    return waits.wait_until(what, predicate, timeout, interval)


class RealRlark:
    """A real ``rlark server --runtime kubernetes`` on the real-node test bed: its namespace (with
    the leader election Role), project default's namespace ``<it>-default`` (RLark's Role,
    Pod Security ``privileged`` for the quickstart's hostPath), and ``shared``, the one directory
    its Pod policy lets Jobs mount (and where it reads RLinf configs)."""

    def __init__(self, tb, work: Path, env: dict[str, str] | None = None):
        """``env``: more of the server's settings."""
        self.tb = tb
        self.ns = tb.project_namespace()
        tb.grant_leader_election(self.ns)
        self.pns = tb.project_namespace(f"{self.ns}-default")
        tb.admin().patch_namespace(self.pns, {"metadata": {"labels": {
            "pod-security.kubernetes.io/enforce": "privileged"}}})
        self.shared = work / "shared"
        self.shared.mkdir()
        self.home = work / "home"
        self.home.mkdir()
        self.env = {"RLARK_RUNTIME": "kubernetes", "RLARK_NAMESPACE": self.ns,
                    "KUBECONFIG": str(tb.rlark_kubeconfig),
                    "RLARK_K8S_HOST_PATH_PREFIXES": str(self.shared),
                    "RLARK_CONFIG_ROOTS": str(self.shared),
                    "RLARK_K8S_IMAGE_PULL_GRACE": "5", **(env or {})}
        self.server = RlarkServer(self.home, self.env).start()

    def restart_after_crash(self) -> None:
        """``kill -9`` of the server, then a new server process on the same store and home."""
        self.server.crash()
        self.server = RlarkServer(self.home, self.env).start()

    def close(self) -> None:
        self.server.stop()
        for ns in (self.pns, self.ns):
            self.tb.delete_namespace(ns)

    # -- what the Run left in Kubernetes, as the admin sees it ---------------------------------
    def objects(self, run_uid: str) -> dict[str, list[str]]:
        """The Run's Pods, Services, ConfigMaps, Secrets and NetworkPolicies (by its label)."""
        from kubernetes import client

        core = self.tb.admin()
        net = client.NetworkingV1Api(core.api_client)
        sel = f"rlark.io/run={run_uid}"
        found = {
            "Pod": core.list_namespaced_pod(self.pns, label_selector=sel).items,
            "Service": core.list_namespaced_service(self.pns, label_selector=sel).items,
            "ConfigMap": core.list_namespaced_config_map(self.pns, label_selector=sel).items,
            "Secret": core.list_namespaced_secret(self.pns, label_selector=sel).items,
            "NetworkPolicy": net.list_namespaced_network_policy(self.pns, label_selector=sel).items,
        }
        return {k: [o.metadata.name for o in v] for k, v in found.items() if v}

    def node_ip(self) -> str:
        """The real node's InternalIP: its bridge's address, which its Pods reach this
        machine at (scripts/k8s-testbed.d/node-run.sh)."""
        node = self.tb.admin().read_node(self.tb.real_node)
        return next(a.address for a in node.status.addresses if a.type == "InternalIP")

    def pod(self, name: str):
        return self.tb.admin().read_namespaced_pod(name, self.pns)

    # -- RLark's API --------------------------------------------------------------------------
    def submit(self, doc: dict) -> dict:
        return self.server.submit(yaml.safe_dump(doc, sort_keys=False))

    def job(self, name: str) -> dict:
        return self.server.job(name)

    def wait_phase(self, name: str, *phases: str, timeout: float = WAIT) -> dict:
        return self.server.wait_phase(name, set(phases), timeout=timeout)

    def wait_ended(self, name: str, timeout: float = WAIT) -> dict:
        """The Job once its Run ended and every Worker was released."""
        return self.server.wait_released(name, timeout=timeout)

    def events(self, name: str) -> list[dict]:
        r = self.server.http.get(f"/api/v1/jobs/{name}/events")
        assert r.status_code == 200, r.text
        return r.json()

    def logs(self, name: str, **params) -> dict[str, list[str]]:
        """Each Worker's log lines through RLark's API (``GET /api/v1/jobs/NAME/logs``)."""
        r = self.server.http.get(f"/api/v1/jobs/{name}/logs", params=params)
        assert r.status_code == 200, r.text
        return {w["name"]: w["lines"] for w in r.json()["workers"]}

    def record(self, name: str) -> dict:
        def final():
            r = self.server.http.get(f"/api/v1/jobs/{name}/record", params={"format": "json"})
            return r.status_code == 200 and not (rec := r.json()).get("provisional") and rec
        return wait_until(f"the final record of {name}", final, timeout=60)


def one_worker(name: str, image: str, run_script: str, **role) -> dict:
    """A Job of one Worker (the head) in ``image``."""
    return {"apiVersion": "rlark.io/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"headRole": "head", "runScript": run_script,
                     "terminationGracePeriodSeconds": 2,
                     "failurePolicy": {"joinTimeoutSeconds": 180, "prepareTimeoutSeconds": 180},
                     "roles": [{"name": "head", "workers": 1, "image": image,
                                "resources": dict(SMALL), **role}]}}


#: the quickstart's memory per role on the real node (job.yaml: head 3Gi, pool 2Gi), see quickstart_copy
QUICKSTART_MEMORY = {"head": "5Gi", "pool": "3Gi"}


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def quickstart_copy(shared: Path, image: str) -> Path:
    """examples/quickstart as a user has it (a git checkout) under ``shared``, with its Job for
    the real node: the README's job.yaml with the test bed's image, its directory mounted at the
    same path (``hostPath``), CPUs the 2-core node can give (Ray counts 1 per node either way) and
    more memory (QUICKSTART_MEMORY). Returns the Job file."""
    work = shared / "quickstart"
    shutil.copytree(EXAMPLES / "quickstart", work)
    git(work, "init", "-q", "-b", "main")
    git(work, "add", ".")
    git(work, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "quickstart")
    # the Workers (uid 1000) write runner.output_dir, results/ of the working directory
    (work / "results").mkdir()
    os.chown(work / "results", 1000, 1000)
    doc = yaml.safe_load((work / "job.yaml").read_text())
    for role in doc["spec"]["roles"]:
        role["image"] = image
        role["resources"]["cpu"] = "500m"
        # a container's memory cgroup (v1) is also charged the page cache of the files its
        # processes map, torch's CUDA libraries among them: the head's 3Gi reached Ray's 95%
        # threshold (its memory monitor killed an RLinf actor) where the local runtime's same
        # processes stay under it
        role["resources"]["memory"] = QUICKSTART_MEMORY[role["name"]]
        role["mounts"] = [{"name": "quickstart", "type": "hostPath", "source": ".",
                           "mountPath": str(work)}]
    path = work / "job-real-node.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path
