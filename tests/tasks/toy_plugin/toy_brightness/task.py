"""The toy task: one image input, one ``[N, 1]`` output (the image's brightness, 0-1), scored
by mean absolute error against the brightness decile each image is labelled with. It exists to
show that a task is one folder: quantmark finds it through the ``quantmark.tasks`` entry point
and runs it through LoadGen, the record and accuracy.txt with nothing else changed."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from quantmark.ground.errors import UserError
from quantmark.ground.hashing import atomic_write_text
from quantmark.ground.metric import Metric
from quantmark.tasks.contract import Respond, Task


def _no_builder(num_classes: int) -> Any:
    raise UserError("the toy model is a file")


class BrightnessTask(Task):
    name: ClassVar[str] = "toy-brightness"
    metric: ClassVar[Metric] = Metric(key="mae", name="brightness MAE", unit="deciles",
                                      higher_is_better=False)

    def claims(self, model_path: Path) -> bool:
        import onnx

        outputs = onnx.load(str(model_path), load_external_data=False).graph.output
        dims = [d.dim_value for d in outputs[0].type.tensor_type.shape.dim]
        return len(outputs) == 1 and dims[1:] == [1]

    def resolve_spec(self, config: Any) -> Any:
        from quantmark.models.zoo import ModelSpec

        return ModelSpec(name=config.model, mean=(0.0,) * 3, std=(255.0,) * 3,
                         builder=_no_builder, input_size=8, resize_short=8, num_classes=0,
                         resize_rule="stretch", performance_sample_count=64, task=self.name)

    def open_dataset(self, config: Any, spec: Any) -> Any:
        from quantmark.qsl.imagenet import ImageFolderDataset

        if config.dataset_path is None:
            raise UserError("the toy task has no built-in dataset; pass --dataset-path")
        return ImageFolderDataset(config.dataset_path)

    def respond(self, spec: Any) -> Respond | None:
        def brightness(outputs: np.ndarray, indices: Any) -> list[np.ndarray]:
            values = np.asarray(outputs, dtype=np.float32).reshape(len(indices), 1)
            return list(values)

        return brightness

    def score(self, work: Path, prepared: Any) -> dict[str, Any]:
        from quantmark.report.accuracy import read_log_entries

        labels = prepared.dataset.labels
        predicted = {}
        for entry in read_log_entries(work / "mlperf_log_accuracy.json"):
            value = np.frombuffer(bytes.fromhex(entry["data"]), dtype=np.float32)[0]
            predicted.setdefault(int(entry["qsl_idx"]), float(value))
        missing = prepared.qsl.total_count - len(predicted)
        if missing:
            return {"missing": missing}
        errors = [abs(10 * predicted[i] - labels[i]) for i in range(len(labels))]
        mae = float(np.mean(errors))
        atomic_write_text(work / "accuracy.txt", f"mae={mae:.4f} deciles, total={len(errors)}\n")
        return {"mae": mae, "total": len(errors)}


TASK = BrightnessTask()
