"""``SILVANFORGE_COMPILE=forbid``: a process where building code is an error, not a cost.

Workers of a Dask, Spark or Ray job run a predictor compiled once on the driver; a
compile there (an untrusted load, a load on another CPU, a stray ``compile`` call) would
silently cost seconds per worker. With the variable set, every path that builds code
calls :func:`check` first and raises :class:`~silvanforge.errors.CompileForbiddenError`.

>>> import os
>>> os.environ.get(VARIABLE, "") in ("", "allow", "forbid")
True
"""

from __future__ import annotations

import os

from ..errors import CompileForbiddenError, SilvanForgeError

VARIABLE = "SILVANFORGE_COMPILE"


def check(what: str) -> None:
    """Raise :class:`CompileForbiddenError` if this process forbids compiling ``what``.

    >>> check("a kernel")  # doctest: +SKIP
    """
    value = os.environ.get(VARIABLE, "").strip().lower()
    if value in ("", "allow"):
        return
    if value == "forbid":
        raise CompileForbiddenError(
            f"{what} would be compiled, but {VARIABLE}=forbid in this process's "
            f"environment (load a trusted saved predictor built for this CPU instead)")
    raise SilvanForgeError(f"{VARIABLE}={os.environ[VARIABLE]!r}: expected 'allow' or "
                           f"'forbid'")
