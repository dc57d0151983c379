"""Jobs used by the Kubernetes rendering, validation and benchmark code (1 to 1,000 Workers)."""

from __future__ import annotations

import copy

from rlark.runtimes.kubernetes.podpolicy import PodPolicy
from rlark.spec import Job

BASE = {
    "apiVersion": "rlark.io/v1",
    "kind": "Job",
    "metadata": {"name": "ppo"},
    "spec": {
        "headRole": "head",
        "runScript": "python train.py --config-name ppo",
        "roles": [{"name": "head", "workers": 1, "image": "docker.io/rlinf/rlinf:0.3.0"}],
    },
}

FULL_ROLES = [
    {
        "name": "actor", "workers": 2, "image": "registry.example.com/rl/rlinf:0.3.0",
        "resources": {"cpu": 16, "memory": "128Gi", "gpu": 8, "devices": {"rdma/hca": 1}},
        "prepareScript": "pip list | grep rlinf\n",
        "env": [{"name": "NCCL_DEBUG", "value": "INFO"}],
        "mounts": [
            {"name": "data", "type": "hostPath", "source": "/data/datasets", "mountPath": "/data",
             "readOnly": True},
            {"name": "ckpt", "type": "pvc", "source": "rl-checkpoints", "mountPath": "/ckpt"},
            {"name": "models", "type": "objectStorage", "source": "s3://models/llama",
             "mountPath": "/models", "readOnly": True,
             "kubernetes": {"storageClass": "csi-s3", "size": "100Gi"}},
            {"name": "Out_Put", "type": "objectStorage", "source": "gs://runs/out",
             "mountPath": "/out",
             "kubernetes": {"csiDriver": "gcsfuse.csi.storage.gke.io",
                            "volumeAttributes": {"bucketName": "{bucket}", "onlyDir": "{prefix}"}}},
        ],
        "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        "kubernetes": {
            "imagePullSecrets": ["regcred"], "serviceAccountName": "rl-worker",
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                            {"key": "dedicated", "value": "rl", "effect": "NoExecute",
                             "tolerationSeconds": 60}],
        },
    },
    {
        "name": "env", "workers": 3, "image": "registry.example.com/rl/sim@sha256:" + "a" * 64,
        "resources": {"cpu": "500m", "memory": 2147483648},
    },
]


#: what the full test Job (FULL_ROLES) needs a server to allow: a hostPath under /data, the
#: ServiceAccount rl-worker, its two tolerations, the StorageClass csi-s3 and the gcsfuse driver
FULL_POLICY = PodPolicy.checked(
    host_path_prefixes=("/data",), service_accounts=("rl-worker",),
    tolerations=("nvidia.com/gpu:NoSchedule", "dedicated=rl:NoExecute"),
    storage_classes=("csi-s3",), csi_drivers=("gcsfuse.csi.storage.gke.io",))


def job(workers: int = 1, full: bool = False, name: str = "ppo") -> Job:
    """``workers`` Workers in all: a head role, and with ``full`` the roles of FULL_ROLES (all
    mount kinds, GPUs, devices, tolerations...) with the rest of the count in the env role."""
    data = copy.deepcopy(BASE)
    data["metadata"]["name"] = name
    roles = data["spec"]["roles"]
    if full:
        extra = copy.deepcopy(FULL_ROLES)
        fixed = 1 + extra[0]["workers"]
        extra[1]["workers"] = max(workers - fixed, 1)
        roles.extend(extra)
    else:
        roles[0]["workers"] = workers
    return Job.model_validate(data)


def big_job(workers: int) -> Job:
    """A head and a pool role with ``workers`` Workers in all (rendering benchmarks)."""
    data = copy.deepcopy(BASE)
    data["spec"]["roles"].append({
        "name": "pool", "workers": workers - 1, "image": "docker.io/rlinf/rlinf:0.3.0",
        "resources": {"cpu": 8, "memory": "64Gi", "gpu": 1},
        "mounts": [{"name": "data", "type": "pvc", "source": "rl-data", "mountPath": "/data"}],
    })
    return Job.model_validate(data)
