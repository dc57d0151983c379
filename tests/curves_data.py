"""Event files as RLinf writes them, for the curves tests: through tensorboard's own
``EventFileWriter`` (the writer ``torch.utils.tensorboard.SummaryWriter``, RLinf's
``_TensorboardLogger``, wraps), each scalar a ``simple_value`` as ``SummaryWriter.add_scalar``
writes it; or a TF2-style scalar tensor with the scalars plugin's metadata."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Iterable

#: a small Run's metrics: step -> {tag: value}
POINTS = {
    0: {"rollout/rewards": 0.5, "train/actor/policy_loss": 1.25, "time/step": 3.0},
    1: {"rollout/rewards": 0.75, "train/actor/policy_loss": 1.0, "time/step": 2.5},
    2: {"rollout/rewards": 1.5, "train/actor/policy_loss": 0.625, "time/step": 2.0},
}


def write_events(logdir: Path | str, points: dict[int, dict[str, float]] = POINTS, *,
                 suffix: str = "", tensors: Iterable[str] = ()) -> Path:
    """Write ``points`` as one event file in ``logdir`` (made when missing); tags in
    ``tensors`` as TF2 scalar tensors, the rest as ``simple_value``. Returns the file."""
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.plugins.scalar import metadata
    from tensorboard.summary.writer.event_file_writer import EventFileWriter
    from tensorboard.util import tensor_util

    os.makedirs(logdir, exist_ok=True)
    before = set(os.listdir(logdir))
    writer = EventFileWriter(str(logdir), filename_suffix=suffix)
    as_tensor = set(tensors)
    first: set[str] = set()
    for step, values in points.items():
        summary = summary_pb2.Summary()
        for tag, value in values.items():
            if tag in as_tensor:
                v = summary.value.add(tag=tag, tensor=tensor_util.make_tensor_proto(value))
                if tag not in first:  # as TF2 writes it: the metadata with the tag's first value
                    v.metadata.CopyFrom(metadata.create_summary_metadata(tag, ""))
                    first.add(tag)
            else:
                summary.value.add(tag=tag, simple_value=value)
        writer.add_event(event_pb2.Event(step=step, wall_time=time.time(), summary=summary))
    writer.close()
    [made] = set(os.listdir(logdir)) - before
    return Path(logdir) / made
