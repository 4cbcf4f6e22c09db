"""What a finished LoadGen test leaves beside its logs: results.json, accuracy.txt, the
effective user.conf, the val_map the accuracy tool reads (with the source image of each sample,
val_groups.txt, where the dataset names them) and, for quick runs, the note that the run is not
valid for submission."""

from __future__ import annotations

import os
import resource
import shlex
from pathlib import Path
from typing import Any

from quantmark.ground.config import RunConfig
from quantmark.ground.hashing import atomic_write_text
from quantmark.ground.records import INTERFERENCE, RESULTS, RunRecord, write_record
from quantmark.models.artifacts import artifact_record

#: frameworks whose own tight loop ``quantmark.bench.vendor_loops`` runs (by SutInfo.framework)
LOOP_FRAMEWORKS = ("onnxruntime", "tflite", "torch", "tensorflow")


def record(config: RunConfig, system: str, prepared: Any, ran: Any, work: Path
           ) -> dict[str, Any]:
    """Write the run's files into ``work`` and return results.json's content. An accuracy run
    with samples missing from its log says how many in ``accuracy.missing``."""
    from quantmark.audit.configs import audit_was_applied

    built = prepared.built
    results = run_record(config, system, prepared, ran, work)
    results.task = prepared.task.describe(prepared.spec)
    if config.mode == "performance" and not config.audit:
        results.repeat = {"index": config.repeat, "of": config.repeats, "set": config.repeat_set}
    if config.audit:
        results.audit = {"test": config.audit, "config": str(ran.audit_config),
                         "applied": audit_was_applied(work / "mlperf_log_detail.txt")}
    if config.mode == "accuracy" or config.audit == "TEST01":
        # line qsl_idx of this file is the label of sample qsl_idx: what the accuracy tool reads
        atomic_write_text(work / "val_map.txt",
                          "".join(f"{rel} {label}\n" for rel, label in prepared.dataset.items))
        write_groups(work, prepared.dataset)
        from quantmark.qsl.label_space import write_classes  # classes.txt: the labels' names

        write_classes(work, prepared.dataset)
    if config.mode == "accuracy":
        results.accuracy = prepared.task.score(work, prepared)
    if config.ensemble:
        from quantmark.run.ensemble_fields import ensemble_record

        results.ensemble = ensemble_record(prepared, work, results.accuracy)
    atomic_write_text(work / "user.conf",
                      built.effective_user_conf(prepared.spec.mlperf_name, config.scenario,
                                                config.user_conf))
    not_valid = [note for note in built.notes if "NOT VALID FOR SUBMISSION" in note]
    if not_valid:
        atomic_write_text(work / "NOT_VALID_FOR_SUBMISSION.txt",
                          "\n".join(not_valid) + "\n(see user.conf beside this file)\n")
    write_record(work / RESULTS, results)
    return results.to_dict()


def run_record(config: RunConfig, system: str, prepared: Any, ran: Any, work: Path
               ) -> RunRecord:
    """What every run records: what ran, on what, with which settings, and LoadGen's summary.
    The interference figures are the parent's: the record names the file it writes."""
    from quantmark.ground import fingerprint
    from quantmark.ground.board import throttling_verdict
    from quantmark.qsl.cache import VERIFIED
    from quantmark.report.loadgen_log import summarize_file

    info, dataset, backend = prepared.info, prepared.dataset, prepared.backend
    return RunRecord(
        config=dict(vars(config)), system_id=system, **sut_and_model(config, prepared),
        dataset={"path": str(dataset.root), "builtin": dataset.builtin,
                 "fingerprint": dataset.fingerprint(), "evaluation_count": len(dataset),
                 "held_out_for_calibration": dataset.held_out_count,
                 "num_classes": getattr(dataset, "num_classes", None),
                 "description": dataset_description(dataset),
                 # the preprocessed caches this run read, hashed and checked as it read them
                 "verified_caches": dict(VERIFIED)},
        # what the SUT's registry entry says it does: a static INT8 path calibrates
        calibration=prepared.calibration.describe() if info.needs_calibration else None,
        settings={"mode": "quick" if config.quick else "official",
                  "quantmark_set": prepared.built.applied, "notes": prepared.built.notes,
                  "workers": prepared.workers, "measurement": vars(prepared.measurement)},
        # the epoch times let a tracker outside the process (energy) cut LoadGen's window
        times={**prepared.times, **(getattr(backend.artifact, "times", None) or {}),
               "loadgen_wall_s": ran.wall_s, "loadgen_started_at": ran.started,
               "loadgen_ended_at": ran.started + ran.wall_s},
        summary=summarize_file(work / "mlperf_log_detail.txt").to_dict(),
        machine={**fingerprint.machine(), "thermal": {
            "before": ran.thermal_before, "after": ran.thermal_after,
            **throttling_verdict(ran.thermal_before, ran.thermal_after)}},
        software=fingerprint.software(info.distributions),
        speed_settings=speed_settings(config, prepared),
        # the test process's peak resident memory so far: models, samples and LoadGen
        memory={"peak_rss_mb": round(
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)},
        interference_file=INTERFERENCE)


def dataset_description(dataset: Any) -> str:
    """The dataset in words: its own description (a built-in one says what it is), or its
    folder, layout, size and classes."""
    own = getattr(dataset, "description", None)
    if own:
        return str(own)
    classes = getattr(dataset, "num_classes", None)
    kind = "class folders" if getattr(dataset, "classes", None) and not \
        (dataset.root / "val_map.txt").is_file() else "val_map.txt"
    return (f"{dataset.root} ({kind}, {len(dataset)} images"
            f"{f', {classes} classes' if classes else ''})")


def sut_and_model(config: RunConfig, prepared: Any) -> dict[str, Any]:
    """results.json's "sut" (what ran, and its proof) and "model" (the artifact, or for an
    ensemble its members: "ensemble" records each one's artifact)."""
    from quantmark.sut.registry import fp32_baseline

    info, spec, backend = prepared.info, prepared.spec, prepared.backend
    return {"sut": {"name": info.name, "framework": info.framework, "precision": info.precision,
                    "device": info.device,
                    "fp32_baseline": None if config.ensemble else fp32_baseline(info.name),
                    **backend.describe()},
            "model": ({"name": spec.name, "members": [m.label for m in spec.members]}
                      if config.ensemble else
                      {"name": spec.name, **artifact_record(backend.artifact),
                       **model_shape(spec)})}


def model_shape(spec: Any) -> dict[str, Any]:
    """The input the model took, the classes it scored and its preprocessing, in words too:
    a run states what it ran (a CIFAR network is not an ImageNet one)."""
    from quantmark.models.preprocessing import describe
    from quantmark.models.workload import resized_weights_note

    if spec.task == "text":  # tokens, not pixels
        return {"input": {"seq_len": spec.seq_len, "padding": spec.padding, "dtype": "int64",
                          "rows": ["input_ids", "attention_mask", "token_type_ids"]},
                "num_classes": spec.num_classes if spec.head == "classifier" else None,
                "preprocessing": f"the model's tokenizer, padded to {spec.seq_len} tokens "
                                 f"({spec.padding} padding)", "weights_note": None}
    return {"input": {"height": spec.input_size, "width": spec.input_width,
                      "channels": spec.channels, "dtype": spec.input_dtype},
            "num_classes": spec.num_classes, "preprocessing": describe(spec),
            "weights_note": resized_weights_note(spec)}


def write_groups(work: Path, dataset: Any) -> None:
    """The source image of each evaluated sample, beside the run's val_map, when the dataset
    names them (its val_groups.txt): crops of one photo are one draw for the report's
    accuracy intervals. An image the file does not name is its own source."""
    from quantmark.qsl.groups import VAL_GROUPS, read_groups

    if not Path(dataset.root).is_dir():  # a text task's file of sentences: each its own
        return
    groups = read_groups(dataset.root)
    if groups is not None:
        atomic_write_text(work / VAL_GROUPS,
                          "".join(f"{rel} {groups.get(rel, rel)}\n" for rel, _ in dataset.items))


def speed_settings(config: RunConfig, prepared: Any) -> dict[str, Any]:
    """What decides this run's speed, to rerun it like for like in the framework's own tool:
    the backend's own settings, and the harness's (batch, predict threads in flight, how the
    process is placed on the CPUs)."""
    affinity = len(os.sched_getaffinity(0))
    online = os.cpu_count() or affinity
    settings = prepared.backend.speed_settings(config.scenario, config.batch_size)
    if prepared.info.device == "cpu" and prepared.info.framework in LOOP_FRAMEWORKS \
            and not config.ensemble:
        # the framework's own tight loop on this artifact: the parity benchmark's reference
        settings["reference_command"] = shlex.join([
            "python", "-m", "quantmark.bench.vendor_loops", "--sut", config.sut,
            "--model", config.model, *(["--model-path", config.model_path]
                                       if config.model_path else []),
            "--batch-size", str(config.batch_size), "--threads", str(config.threads),
            "--input", "real"])
    return {**settings,
            "scenario": config.scenario, "batch_size": config.batch_size,
            "workers": prepared.workers,
            "single_stream_inline": config.scenario == "SingleStream" and prepared.workers == 1,
            "process_cpus": affinity, "online_cpus": online,
            "process_pinned": affinity < online}
