"""The model registry: versions count up atomically, artifacts are checked, metadata says what was trained."""

from __future__ import annotations

import json
import threading

import pytest

from forecasting.registry import ModelRegistry, RegistrySource, serialize


def test_versions_count_up_per_job_and_the_newest_is_found(tmp_path, trained):
    result, _ = trained
    registry = ModelRegistry(tmp_path)
    first = registry.publish("shop", serialize(result.model), result.metadata)
    second = registry.publish("shop", serialize(result.model), result.metadata)
    other = registry.publish("a/b c", serialize(result.model), result.metadata)
    assert (first.name, second.name, other.name) == ("v000001", "v000002", "v000001")
    assert registry.newest("shop") == second and registry.jobs() == ["a/b c", "shop"]
    assert registry.newest("nobody") is None
    model, metadata = registry.load(second)
    assert model.label == result.model.label and metadata["version"] == 2


def test_metadata_records_orders_resolution_seasons_backtest_and_range(tmp_path, trained):
    result, _ = trained
    entry = ModelRegistry(tmp_path).publish("shop", serialize(result.model), result.metadata)
    metadata = json.loads((entry.path / "metadata.json").read_text())
    assert metadata["model"]["family"] == "arima" and len(metadata["model"]["order"]) == 3
    assert metadata["resolution_s"] == 300.0
    assert metadata["seasonality"]["profile"]["periods_s"] == [86_400.0]
    assert set(metadata["backtest"]["wape"]) == {"arima", "holt-winters", "seasonal-naive"}
    assert metadata["training_range"]["start"].startswith("2026-01-05T00:00:00")
    assert metadata["artifact"]["bytes"] == (entry.path / "model.pkl").stat().st_size


def test_concurrent_publishers_never_share_a_version(tmp_path, trained):
    result, _ = trained
    registry, artifact = ModelRegistry(tmp_path), serialize(result.model)
    threads = [threading.Thread(target=registry.publish, args=("shop", artifact, {})) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [entry.version for entry in registry.versions("shop")] == list(range(1, 9))
    assert not list((tmp_path / "shop").glob(".staging-*"))


def test_a_damaged_artifact_or_another_resolution_is_refused(tmp_path, trained):
    result, _ = trained
    registry = ModelRegistry(tmp_path)
    entry = registry.publish("shop", serialize(result.model), result.metadata)
    source = RegistrySource(tmp_path, "shop", resolution_s=600.0)  # finer models cannot be coarsened
    with pytest.raises(ValueError, match=r"trained at 300 s buckets, finer than the forecaster's 600 s"):
        source.load(entry.name)
    odd = RegistrySource(tmp_path, "shop", resolution_s=70.0)  # 300 s is no multiple of 70 s
    with pytest.raises(ValueError, match="not a multiple"):
        odd.load(entry.name)
    (entry.path / "model.pkl").write_bytes(b"garbage")
    with pytest.raises(ValueError, match="sha256"):
        registry.load(entry)


def test_a_version_of_another_format_or_without_a_step_is_refused_with_its_reason(tmp_path, trained):
    import json

    result, _ = trained
    registry = ModelRegistry(tmp_path)
    source = RegistrySource(tmp_path, "shop", resolution_s=300.0)
    for change, reason in (({"format": 99}, "format 99, this foresail reads 1"),
                           ({"resolution_s": {"value": 300}}, "resolution_s .* is not a step")):  # fmt: skip
        entry = registry.publish("shop", serialize(result.model), result.metadata)
        metadata = json.loads((entry.path / "metadata.json").read_text())
        (entry.path / "metadata.json").write_text(json.dumps({**metadata, **change}))
        with pytest.raises(ValueError, match=reason):
            source.load(entry.name)


def test_a_publish_the_disk_refuses_leaves_no_half_written_version(tmp_path, trained, monkeypatch):
    import errno
    from pathlib import Path

    result, _ = trained
    registry = ModelRegistry(tmp_path)

    def full(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(OSError):
        registry.publish("shop", serialize(result.model), result.metadata)
    monkeypatch.undo()
    assert list(registry.job_dir("shop").iterdir()) == [] and registry.versions("shop") == []
