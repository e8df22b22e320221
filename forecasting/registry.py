"""The model registry: versioned forecaster models per job, on a filesystem the daemon can read.

Layout: `ROOT/<job, URL-quoted>/v000001/{model.pkl, metadata.json}`, versions counting up per job. A
version is written into a hidden temporary directory and renamed into place, so a reader sees either no
version or a complete one, and two writers never get the same number (the rename fails for the loser,
who takes the next). `metadata.json` carries the artifact's SHA-256; the loader checks it. Every path stays
inside ROOT: a job name is one quoted path segment whose leading dots are quoted too (a job named `..` or
`.staging` is a plain directory, never the parent or a hidden one), and an artifact is a file of its version.

The artifact is a pickle: load registries you trust only, as with any pickled model.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import pickle
import re
import shutil
import uuid
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import numpy as np

from forecasting.arima import FittedModel

ARTIFACT = "model.pkl"
METADATA = "metadata.json"
FORMAT = 1
_VERSION = re.compile(r"^v(\d{6,})$")


@dataclass(frozen=True)
class RegistryEntry:
    """One published version of a job's model."""

    job: str
    version: int
    path: Path

    @property
    def name(self) -> str:
        return f"v{self.version:06d}"

    def metadata(self) -> dict[str, Any]:
        return json.loads((self.path / METADATA).read_text(encoding="utf-8"))


class ModelRegistry:
    """Publishes and finds versions; one directory per job."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def job_dir(self, job: str) -> Path:
        if not job:
            raise ValueError("a job name must not be empty")
        segment = quote(job, safe="")
        dots = len(segment) - len(segment.lstrip("."))
        return self.root / ("%2E" * dots + segment[dots:])

    def jobs(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(
            unquote(p.name) for p in self.root.iterdir() if p.is_dir() and not p.name.startswith(".")
        )

    def versions(self, job: str) -> list[RegistryEntry]:
        """Complete versions of `job`, oldest first."""
        directory = self.job_dir(job)
        if not directory.is_dir():
            return []
        found = []
        for child in directory.iterdir():
            match = _VERSION.match(child.name)
            if match and (child / METADATA).is_file():
                found.append(RegistryEntry(job, int(match.group(1)), child))
        return sorted(found, key=lambda entry: entry.version)

    def newest(self, job: str) -> RegistryEntry | None:
        versions = self.versions(job)
        return versions[-1] if versions else None

    def publish(self, job: str, artifact: bytes, metadata: dict[str, Any]) -> RegistryEntry:
        """Write a new version (artifact bytes as produced by `serialize`); returns it."""
        directory = self.job_dir(job)
        directory.mkdir(parents=True, exist_ok=True)
        staging = directory / f".staging-{uuid.uuid4().hex}"
        staging.mkdir()
        try:
            return self._rename_into_place(job, directory, staging, artifact, metadata)
        except BaseException:  # a full disk: no half-written version left behind
            shutil.rmtree(staging, ignore_errors=True)
            raise

    def _rename_into_place(
        self, job: str, directory: Path, staging: Path, artifact: bytes, metadata: dict[str, Any]
    ) -> RegistryEntry:
        (staging / ARTIFACT).write_bytes(artifact)
        newest = self.newest(job)
        version = newest.version + 1 if newest else 1
        while True:
            full = {
                **metadata,
                "format": FORMAT,
                "job": job,
                "version": version,
                "artifact": {
                    "file": ARTIFACT,
                    "sha256": hashlib.sha256(artifact).hexdigest(),
                    "bytes": len(artifact),
                },
            }
            (staging / METADATA).write_text(json.dumps(full, indent=2, sort_keys=True), encoding="utf-8")
            target = directory / f"v{version:06d}"
            try:
                os.rename(staging, target)  # atomic; fails when a concurrent writer took the number
            except OSError:
                if not target.exists():
                    raise
                version += 1
                continue
            return RegistryEntry(job, version, target)

    def load(self, entry: RegistryEntry) -> tuple[FittedModel, dict[str, Any]]:
        """The model and its metadata; ValueError when the metadata is of another format, job or version, or
        the artifact does not match its checksum."""
        metadata = entry.metadata()
        if metadata.get("format") != FORMAT:  # a newer foresail's layout: read as this one, it would mislead
            raise ValueError(f"{entry.path}: format {metadata.get('format')!r}, this foresail reads {FORMAT}")
        # publish writes both into every version; another pair is a directory copied or synced from another
        # job or number, whose model forecasts that job's load (one written without them: not by publish)
        made_for = (metadata.get("job"), metadata.get("version"))
        if made_for != (entry.job, entry.version) or isinstance(made_for[1], bool):
            raise ValueError(
                f"{entry.path}: metadata says job {made_for[0]!r} version {made_for[1]!r}, "
                f"not {entry.job!r} {entry.name}: a version copied from elsewhere"
            )
        name = metadata["artifact"]["file"]
        if Path(name).name != name or name in ("", ".", ".."):
            raise ValueError(f"{entry.path}: artifact {name!r} is not a file of this version")
        artifact = (entry.path / name).read_bytes()
        if hashlib.sha256(artifact).hexdigest() != metadata["artifact"]["sha256"]:
            raise ValueError(f"{entry.path}: artifact does not match its sha256 in {METADATA}")
        model = pickle.loads(artifact)
        if not isinstance(model, FittedModel):
            raise ValueError(f"{entry.path}: artifact is a {type(model).__name__}, not a FittedModel")
        return model, metadata


def serialize(model: FittedModel) -> bytes:
    return pickle.dumps(model, protocol=pickle.HIGHEST_PROTOCOL)


class RegistrySource:
    """What the online forecaster polls: the newest model of one job, at the forecaster's resolution."""

    def __init__(
        self, root: str | Path, job: str, resolution_s: float, poll_interval_s: float = 300.0
    ) -> None:
        self.registry = ModelRegistry(root)
        self.job = job
        self.resolution_s = resolution_s
        self.poll_interval_s = poll_interval_s

    def newest_version(self) -> str | None:
        """Name of the newest complete version ("v000003"), None when the job has none (a cheap listing)."""
        entry = self.registry.newest(self.job)
        return entry.name if entry else None

    def older_version(self, version: str) -> str | None:
        """The newest complete version before `version` (None: none)."""
        number = int(_VERSION.match(version).group(1))
        older = [entry for entry in self.registry.versions(self.job) if entry.version < number]
        return older[-1].name if older else None

    def fingerprint(self, version: str) -> str:
        """The artifact's SHA-256 from the version's metadata ("" when unreadable): a number is reused
        when its version was deleted, and a version still being copied in reads differently later."""
        try:
            match = _VERSION.match(version)
            entry = RegistryEntry(self.job, int(match.group(1)), self.registry.job_dir(self.job) / version)
            return str(entry.metadata()["artifact"]["sha256"])
        except Exception:
            return ""

    def load(self, version: str) -> FittedModel:
        """That version's model; ValueError when it is damaged or made for another resolution."""
        return self._load(version)[0]

    def _load(self, version: str) -> tuple[FittedModel, dict[str, Any]]:
        match = _VERSION.match(version)
        if not match:
            raise ValueError(f"not a version name: {version!r}")
        entry = RegistryEntry(self.job, int(match.group(1)), self.registry.job_dir(self.job) / version)
        model, metadata = self.registry.load(entry)
        trained_s = metadata.get("resolution_s")
        if isinstance(trained_s, bool) or not isinstance(trained_s, int | float) or not trained_s > 0:
            raise ValueError(f"{self.job} {version}: resolution_s {trained_s!r} is not a step in seconds")
        if abs(trained_s - self.resolution_s) <= 1e-9:
            return model, metadata
        if trained_s > self.resolution_s:  # a history coarser than the daemon's buckets (60 s exports)
            from forecasting.spark.models import resampled

            try:
                return resampled(model, self.resolution_s), metadata
            except ValueError as error:
                raise ValueError(f"{self.job} {version}: {error}: retrain with the daemon's config") from None
        raise ValueError(
            f"{self.job} {version} was trained at {trained_s:g} s buckets, finer than the forecaster's "
            f"{self.resolution_s:g} s: retrain with the daemon's forecast.resolution_s"
        )

    def prepare(self, version: str, values: np.ndarray, times_s: np.ndarray, max_buckets: int) -> FittedModel:
        """Load that version and join it to the forecaster's retained buckets (runs on its executor).
        ValueError for a model whose history ends after the newest bucket: timestamps in local time read
        as UTC, whose Holt-Winters state would drop every bucket of the daemon as late."""
        from forecasting.spark.models import install

        model, metadata = self._load(version)
        ends_s = _training_end_s(metadata)
        newest_s = float(times_s[-1]) + self.resolution_s / 2 if len(times_s) else math.inf
        if ends_s is not None and ends_s > newest_s + metadata["resolution_s"]:
            raise ValueError(
                f"{self.job} {version}: its history ends at {metadata['training_range']['end']}, "
                f"{ends_s - newest_s:.0f} s after the forecaster's newest data: history timestamps not in UTC?"
            )
        return install(model, values, times_s, max_buckets)


def _training_end_s(metadata: dict[str, Any]) -> float | None:
    """The training history's last timestamp (None when the metadata does not say)."""
    try:
        return datetime.fromisoformat(metadata["training_range"]["end"]).timestamp()
    except (KeyError, TypeError, ValueError):
        return None
