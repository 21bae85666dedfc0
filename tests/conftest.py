import os
import sys

import pytest
from hypothesis import HealthCheck, settings

# util.py sits beside the tests; make it importable whatever the rootdir.
sys.path.insert(0, os.path.dirname(__file__))
from util import unavailable  # noqa: E402 - after the path is set

settings.register_profile(
    "default", max_examples=25, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


# The GPU tools' fixtures, for every test module: CI has no GPU but must run these
# tests, so there a missing pyopencl / OpenCL device / NVRTC is a failure; elsewhere a
# skip with the reason printed.
@pytest.fixture(scope="session")
def opencl():
    try:
        import pyopencl  # noqa: F401
        from silvanforge.backends.gpu.runtime import _opencl_context
        _opencl_context()
    except Exception as exc:  # noqa: BLE001 - any reason means: no OpenCL here
        unavailable(f"no OpenCL device (install pocl-opencl-icd and pyopencl): {exc}",
                    "the GPU tests")


@pytest.fixture(scope="session")
def nvrtc():
    try:
        from silvanforge.backends.gpu.nvrtc import compile_ptx
        compile_ptx('extern "C" __global__ void probe(double* x) { x[0] = 1.0; }')
    except Exception as exc:  # noqa: BLE001
        unavailable(f"NVRTC is not usable (pip install cuda-python nvidia-cuda-nvrtc): "
                    f"{exc}", "the GPU tests")
    return compile_ptx
