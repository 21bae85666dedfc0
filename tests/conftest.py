import os
import sys

from hypothesis import HealthCheck, settings

# util.py sits beside the tests; make it importable whatever the rootdir.
sys.path.insert(0, os.path.dirname(__file__))

settings.register_profile(
    "default", max_examples=25, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
