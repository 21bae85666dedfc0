"""The persistent tuning cache: one JSON file of tuned configurations in the user cache dir.

An entry's key is everything a tuned configuration depends on: the model (a sha256 of
the Forest's arrays and metadata), the batch size, the thread count, the CPU code is built
for (LLVM's CPU name and feature string) and the SilvanForge version. A different model, CPU or
version therefore misses and tunes afresh. The file is rewritten whole through a
temporary file and ``os.replace``, so a reader never sees half of it; writers take an
exclusive ``fcntl.flock`` on ``tuning.json.lock`` beside it for the whole
read-modify-write, so processes storing at once lose no entry (where ``fcntl`` does not
exist, Windows, a concurrent store may still lose one: it is a cache, that costs a
re-tune). Every entry read is checked (a JSON object with a key object and a
configuration :meth:`Configuration.from_json` accepts); the others are skipped with a
:class:`~silvanforge.errors.SilvanForgeWarning`, so a damaged or foreign file costs a
re-tune, never an error.

The folder is ``$SILVANFORGE_CACHE_DIR``, else ``$XDG_CACHE_HOME/silvanforge``, else
``~/.cache/silvanforge``.

>>> key = cache_key(forest, batch_size=1024, n_jobs=2)          # doctest: +SKIP
>>> store(key, configuration); lookup(key)                       # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import warnings
from contextlib import contextmanager
from functools import lru_cache
from typing import Any, Iterator

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None

import numpy as np

from ..backends.cpu import Target
from ..errors import ModelFormatError, SilvanForgeWarning
from ..model import serialize
from ..model.forest import Forest
from ..version import __version__
from .configuration import Configuration

FILE_NAME = "tuning.json"


def cache_dir() -> str:
    """The folder of the tuning cache (not created until something is stored)."""
    explicit = os.environ.get("SILVANFORGE_CACHE_DIR")
    if explicit:
        return explicit
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"),
                                                            ".cache")
    return os.path.join(base, "silvanforge")


_INPUT_RULES = ("sparse_absent", "unseen_category")


def model_hash(forest: Forest) -> str:
    """sha256 of the Forest's arrays (name, dtype, shape, bytes) and its metadata; the
    optional arrays that no prediction reads (``serialize.NOT_PREDICTED``) left out, so
    a frontend that starts reading them keeps the tuned entries of its models.

    >>> len(model_hash(forest))                                   # doctest: +SKIP
    64
    """
    arrays, meta = serialize.to_arrays(forest)
    # How inputs are read (model/inputs.py) changes no kernel: entries tuned before
    # these fields existed still apply.
    for name in _INPUT_RULES:
        meta.pop(name, None)
    digest = hashlib.sha256()
    for name in sorted(arrays):
        if name in serialize.NOT_PREDICTED:
            continue  # covers and source ids change no prediction kernel
        a = np.ascontiguousarray(arrays[name])
        digest.update(f"{name}:{a.dtype.str}:{a.shape}".encode())
        digest.update(a.tobytes())
    digest.update(json.dumps(meta, sort_keys=True).encode())
    return digest.hexdigest()


@lru_cache(maxsize=None)
def cpu_id(cpu: str = "native") -> str:
    """The CPU code is built for (``cpu``: "native", this machine, or an LLVM CPU name)
    as code generation sees it: LLVM's CPU name and feature string."""
    target = Target.named(cpu)
    return f"{target.cpu} {target.features}"


def cache_key(forest: Forest, batch_size: int, n_jobs: int,
              cpu: str = "native") -> dict[str, Any]:
    """The key of a tuning result (a JSON object; compared whole)."""
    return {"model": model_hash(forest), "batch_size": int(batch_size),
            "n_jobs": int(n_jobs), "cpu": cpu_id(cpu), "version": __version__}


def _path() -> str:
    return os.path.join(cache_dir(), FILE_NAME)


def _entries() -> list[dict[str, Any]]:
    """The cache's valid entries (a warning names the invalid ones, which are dropped
    at the next store)."""
    try:
        with open(_path()) as fh:
            data = json.load(fh)
    except (OSError, ValueError):  # no cache yet, or a damaged one: start afresh
        return []
    entries = data.get("entries") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        warnings.warn(f"tuning cache {_path()}: not a list of entries; ignored",
                      SilvanForgeWarning, stacklevel=3)
        return []
    valid, errors = [], []
    for i, entry in enumerate(entries):
        try:
            if not isinstance(entry, dict) or not isinstance(entry.get("key"), dict):
                raise ModelFormatError("an entry is an object with a key object")
            Configuration.from_json(entry.get("configuration"))
        except ModelFormatError as exc:
            errors.append(f"entry {i}: {exc}")
        else:
            valid.append(entry)
    if errors:
        warnings.warn(f"tuning cache {_path()}: skipped {len(errors)} invalid entr"
                      f"{'y' if len(errors) == 1 else 'ies'} ({errors[0]})",
                      SilvanForgeWarning, stacklevel=3)
    return valid


def lookup(key: dict[str, Any]) -> dict[str, Any] | None:
    """The stored configuration (as JSON) for exactly ``key``, or None."""
    return next((e["configuration"] for e in _entries() if e.get("key") == key), None)


def lookup_any_batch(key: dict[str, Any]) -> dict[str, Any] | None:
    """The most recently stored configuration matching ``key`` in all but batch size
    (``compile(schedule="auto")`` does not know the batch size), or None."""
    rest = {k: v for k, v in key.items() if k != "batch_size"}
    matches = [e["configuration"] for e in _entries()
               if {k: v for k, v in e.get("key", {}).items() if k != "batch_size"} == rest]
    return matches[-1] if matches else None


@contextmanager
def _locked(folder: str) -> Iterator[None]:
    """An exclusive lock on the cache among processes (a no-op without ``fcntl``)."""
    if fcntl is None:
        yield
        return
    with open(os.path.join(folder, FILE_NAME + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        yield


def store(key: dict[str, Any], configuration: dict[str, Any]) -> str:
    """Add or replace the entry for ``key``; returns the cache file's path."""
    folder = cache_dir()
    os.makedirs(folder, exist_ok=True)
    with _locked(folder):  # no other writer between reading the entries and replacing
        entries = [e for e in _entries() if e.get("key") != key]
        entries.append({"key": key, "configuration": configuration})
        fd, tmp = tempfile.mkstemp(prefix=".tuning-", suffix=".json", dir=folder)
        try:
            with os.fdopen(fd, "w") as fh:
                json.dump({"entries": entries}, fh, indent=1)
            os.replace(tmp, _path())
        except BaseException:
            os.unlink(tmp)
            raise
    return _path()
