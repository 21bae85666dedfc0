"""A predictor's compiled SHAP contributions: the kernel of
:mod:`silvanforge.representations.contribs`, built when first asked for.

:class:`Contributions` owns the tables, the machine code and the entry; the
:class:`~silvanforge.runtime.predictor.Predictor` builds one on its first
``predict(X, output="contribs")`` (logged once at INFO on the ``silvanforge`` logger),
keeps it, and saves its object code with the predictor's so that a reloaded predictor
does not compile it again.

>>> predictor.predict(X, output="contribs")              # doctest: +SKIP
"""

from __future__ import annotations

import logging
import time
import warnings
from typing import Any

import numpy as np

from ..backends.cpu import CompiledKernel, RowsLayout, Target, compile_kernel
from ..errors import BackendError
from ..model.cover import require_contributions
from ..model.forest import Forest
from ..model.inputs import as_rows
from ..representations.contribs import ROWS_PER_THREAD, build
from . import fork, guard

log = logging.getLogger("silvanforge")


class Contributions:
    """The contributions kernel of ``forest`` for ``target``, reloaded from
    ``object_code`` when given (and runnable here), else compiled.

    >>> Contributions(forest, Target.host())(X, threads=2)   # doctest: +SKIP
    """

    def __init__(self, forest: Forest, target: Target,
                 object_code: tuple[bytes, ...] | None = None) -> None:
        require_contributions(forest)
        self.forest = forest
        self.tables, self.arrays, lir = build(forest)
        self.lir = lir
        code = None
        if object_code:
            try:
                code = CompiledKernel.from_object(object_code, target, lir.name, lir.params)
            except BackendError as exc:
                warnings.warn(f"recompiling the contributions kernel: {exc}", stacklevel=4)
        if code is None:
            guard.check("the contributions (TreeSHAP) kernel")
            start = time.perf_counter()
            log.info("compiling the contributions (TreeSHAP) kernel")
            code = compile_kernel(lir, opt=3, target=target)
            log.info("contributions kernel built (%.2f s)", time.perf_counter() - start)
        self.code = code
        self._call = code.entry([a.ctypes.data for a in self.arrays.values()],
                                RowsLayout(forest.n_features, forest.input_dtype))

    def __call__(self, X: Any, threads: int) -> np.ndarray:
        """The contributions of rows ``X`` (``reference.contributions``'s shape) on at
        most ``threads`` threads."""
        f, t = self.forest, self.tables
        rows = X if type(X) is np.ndarray and X.ndim == 2 else as_rows(X, f)
        n = len(rows)
        threads = max(1, min(threads, n // ROWS_PER_THREAD))
        if threads > 1:
            threads = fork.threads(threads)
        out = np.zeros((n, f.n_outputs, f.n_features + 1))
        scratch = np.empty(threads * t.scratch_stride)
        ones = np.empty(threads * t.ones_stride, dtype=np.int32)
        if n and not self._call(rows, n, out, scratch, ones, threads):
            rows = as_rows(X, f)
            if not self._call(rows, n, out, scratch, ones, threads):
                raise BackendError(f"the contributions kernel refused rows converted for "
                                   f"it: {rows.dtype} {rows.shape} {rows.flags}")
        elif not n:
            as_rows(X, f)  # an empty input with wrong columns is still wrong
        return out[:, 0, :] if f.n_outputs == 1 else out
