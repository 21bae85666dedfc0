"""The compile planner: every choice that decides the generated code, made in one place.

:func:`make_plan` turns (forest, target, the user's options) into a :class:`Plan`, which
the CPU and GPU predictors build. The tiling options' layout (:mod:`.layout`), tuned
configurations and the tuning cache they live in (:mod:`.configuration`, :mod:`.cache`)
and the GPU template's rules (:mod:`.gpu_template`) are read here; the search that fills
the cache sits above the runtime (:mod:`silvanforge.tune`).

>>> from silvanforge.plan import make_plan
>>> make_plan.__module__
'silvanforge.plan.planner'
"""

from .configuration import Configuration
from .layout import Profile, profile
from .plan import Plan
from .planner import make_plan

__all__ = ["Plan", "make_plan", "Configuration", "Profile", "profile"]
