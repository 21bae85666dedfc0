"""A search's result through the tuning cache: the CPU and GPU tuners both end here."""

from __future__ import annotations

from typing import Any, Callable

from ..errors import InputError
from ..plan import cache
from ..plan.configuration import Configuration


def cached_search(key: dict[str, Any], use_cache: bool, search: Callable[[], list],
                  n_rows: int, how: str, what: str = "") -> Configuration:
    """The cached configuration under ``key``, or the fastest of ``search()``'s timed
    results (stored under ``key``)."""
    if use_cache and (hit := cache.lookup(key)) is not None:
        return Configuration.from_json(hit)
    results = [r for r in search() if r.seconds is not None]
    if not results:
        raise InputError(f"no candidate {what}configuration compiled within the budget; "
                         "raise budget_s")
    config = Configuration.of(results[0], n_rows, how)
    if use_cache:
        cache.store(key, config.to_json())
    return config
