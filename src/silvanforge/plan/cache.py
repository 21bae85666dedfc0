"""The persistent tuning cache: one JSON file of tuned configurations in the user cache dir.

An entry's key is everything a tuned configuration depends on: the model (a sha256 of
the Forest's arrays and metadata), the batch size, the thread count, the CPU code is built
for (LLVM's CPU name and feature string) and the SilvanForge version. A different model, CPU or
version therefore misses and tunes afresh. The file is rewritten whole through a
temporary file and ``os.replace``, so a reader never sees half of it; two processes
writing at once may lose one entry (it is a cache: that only costs a re-tune).

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
from functools import lru_cache
from typing import Any

import numpy as np

from ..backends.cpu import Target
from ..model import serialize
from ..model.forest import Forest
from ..version import __version__

FILE_NAME = "tuning.json"


def cache_dir() -> str:
    """The folder of the tuning cache (not created until something is stored)."""
    explicit = os.environ.get("SILVANFORGE_CACHE_DIR")
    if explicit:
        return explicit
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"),
                                                            ".cache")
    return os.path.join(base, "silvanforge")


def model_hash(forest: Forest) -> str:
    """sha256 of the Forest's arrays (name, dtype, shape, bytes) and its metadata.

    >>> len(model_hash(forest))                                   # doctest: +SKIP
    64
    """
    arrays, meta = serialize.to_arrays(forest)
    digest = hashlib.sha256()
    for name in sorted(arrays):
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
    try:
        with open(_path()) as fh:
            data = json.load(fh)
    except (OSError, ValueError):  # no cache yet, or a damaged one: start afresh
        return []
    return data.get("entries", []) if isinstance(data, dict) else []


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


def store(key: dict[str, Any], configuration: dict[str, Any]) -> str:
    """Add or replace the entry for ``key``; returns the cache file's path."""
    entries = [e for e in _entries() if e.get("key") != key]
    entries.append({"key": key, "configuration": configuration})
    folder = cache_dir()
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tuning-", suffix=".json", dir=folder)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump({"entries": entries}, fh, indent=1)
        os.replace(tmp, _path())
    except BaseException:
        os.unlink(tmp)
        raise
    return _path()
