"""An exported library, loaded in Python through ctypes, without compiling anything.

The library describes itself: ``NAME_metadata_json`` is a constant JSON string (the
object ``NAME_metadata()`` returns), read as data before any of the library's code runs,
so that a library built for a CPU this machine lacks features for is refused with an
error rather than run into an illegal instruction.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from ..backends.cpu import Target
from ..errors import BackendError, InputError, ModelFormatError
from ..model.inputs import as_rows
from .library import FORMAT_VERSION, check_name

_LIBRARY_FILE = re.compile(r"lib(\w+)\.(so|dylib)\Z")


class Library:
    """An exported library loaded in this process (see :func:`load_library`).

    ``metadata`` is the library's description (shape, transform, feature names, class
    labels, target); ``n_features`` and ``n_outputs`` its shape.
    """

    def __init__(self, path: str | os.PathLike, name: str | None = None) -> None:
        path = Path(path)
        if name is None:
            match = _LIBRARY_FILE.match(path.name)
            if match is None:
                raise InputError(f"{path}: not named libNAME.so; pass name=")
            name = match.group(1)
        self.name, self.path = check_name(name), path
        try:
            self._lib = ctypes.CDLL(os.fspath(path.resolve()))
            text = ctypes.string_at(ctypes.addressof(
                ctypes.c_char.in_dll(self._lib, f"{name}_metadata_json")))
        except (OSError, ValueError) as exc:
            raise ModelFormatError(f"{path}: not a library SilvanForge exported as "
                                   f"{name!r} ({exc})") from None
        try:
            meta = json.loads(text.decode())
            fmt = meta.get("format") if isinstance(meta, dict) else None
            if type(fmt) is not int or fmt != FORMAT_VERSION:
                raise ModelFormatError(f"{path}: library format {fmt!r} is not "
                                       f"{FORMAT_VERSION} (export it again)")
            self.metadata: dict[str, Any] = meta
            self.target = Target(*map(str, meta["target"]))
            self.n_features = int(meta["n_features"])
            self.n_outputs = int(meta["n_outputs"])
            self._flat = bool(meta["flat_output"]) and self.n_outputs == 1
            outputs = {str(k): (str(v["function"]), int(v["columns"]),
                                np.dtype(v.get("dtype", "float64")),
                                tuple(int(d) for d in v.get("shape", [int(v["columns"])])))
                       for k, v in meta["outputs"].items()}
        except (UnicodeDecodeError, ValueError, KeyError, TypeError,
                AttributeError) as exc:
            raise ModelFormatError(f"{path}: corrupt metadata ({exc!r})") from None
        refusal = self.target.mismatch(Target.host())
        if refusal is not None:  # checked before any of its code runs
            raise BackendError(f"{path} {refusal}: export it for this CPU (--cpu)")
        self._shape = SimpleNamespace(n_features=self.n_features,
                                      input_dtype=np.dtype(np.float64),
                                      pandas_categories=None)
        self._functions = {}  # output: (C function, columns, dtype, shape after rows)
        for output, (symbol, *layout) in outputs.items():
            fn = getattr(self._lib, symbol)
            fn.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p]
            fn.restype = ctypes.c_int
            self._functions[output] = (fn, *layout)
        self._last_error = getattr(self._lib, f"{name}_last_error")
        self._last_error.restype = ctypes.c_char_p
        self._set_threads = getattr(self._lib, f"{name}_set_num_threads")
        self._set_threads.argtypes = [ctypes.c_int]

    def predict(self, X: Any, output: str = "value") -> np.ndarray:
        """The library's ``output`` ("value", "margin", or "leaf" and "contribs" when
        exported with them) for the rows of ``X``, shaped as :meth:`Predictor.predict
        <silvanforge.Predictor.predict>` shapes it.

        >>> lib = silvanforge.load_library("out/libhiggs.so")    # doctest: +SKIP
        >>> lib.predict(X, output="margin")                      # doctest: +SKIP
        """
        if output not in self._functions:
            raise InputError(f"output must be one of {', '.join(self._functions)}, not "
                             f"{output!r}")
        fn, columns, dtype, shape = self._functions[output]
        rows = as_rows(X, self._shape)
        out = np.empty((len(rows), columns), dtype=dtype)
        if fn(rows.ctypes.data, len(rows), out.ctypes.data) != 0:
            raise InputError(f"{self.name}: {self._last_error().decode()}")
        if output in ("value", "margin"):
            return out[:, 0] if self._flat and columns == 1 else out
        return out.reshape((len(rows), *shape))

    def set_num_threads(self, n: int) -> None:
        """The threads a call may use (0: the OpenMP runtime's default), for every
        caller of this library in the process (``NAME_set_num_threads``).

        >>> lib.set_num_threads(4)                               # doctest: +SKIP
        """
        self._set_threads(int(n))

    def __repr__(self) -> str:
        return (f"<Library {self.name}: {self.n_features} features, {self.n_outputs} "
                f"outputs, {self.target.triple} CPU {self.target.cpu}>")


def load_library(path: str | os.PathLike, name: str | None = None) -> Library:
    """Load a library written by ``silvanforge export`` or :meth:`Predictor.export
    <silvanforge.Predictor.export>` (``name``: its NAME, by default read from
    ``libNAME.so``). Nothing is compiled. A library is machine code: load only files you
    trust as you trust your own code (docs/DEPLOY.md). Raises BackendError for a library
    built for a CPU whose features this machine lacks.

    >>> lib = silvanforge.load_library("out/libhiggs.so")        # doctest: +SKIP
    >>> lib.predict(X)                                           # doctest: +SKIP
    """
    return Library(path, name)
