"""Model frontends: files and live objects of each library → :class:`Forest`.

Each frontend module offers ``load_bytes(data: bytes) -> Forest`` for its file formats
and ``load_object(obj) -> Forest`` for the library's live objects. :func:`load` picks the
frontend from the file's content (never from the extension alone) or from the object's
type, and turns every failure into a :class:`SilvanForgeError` that names the file.

A file is only ever parsed as data: JSON, UBJSON, LightGBM's text format or an ONNX
protobuf. Pickles (and joblib files, which are pickles) are refused, never loaded.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import threading
import zlib
from typing import Any, Iterator

from ..errors import ModelFormatError, SilvanForgeError, UnsupportedModelError
from ..model.forest import Forest
from . import number_scan

# Objects are matched by the top-level package their type comes from.
_OBJECT_FRONTENDS = {
    "xgboost": "xgboost",
    "lightgbm": "lightgbm",
    "sklearn": "sklearn",
    "onnx": "onnx",
}


def _frontend(name: str) -> Any:
    return importlib.import_module(f"{__name__}.{name}")


def detect_format(data: bytes) -> str:
    """The frontend for a model file's bytes: "xgboost", "lightgbm" or "onnx".

    >>> detect_format(b'{"learner": {}}')
    'xgboost'
    >>> detect_format(b"tree\\nversion=v4\\n")
    'lightgbm'
    """
    if not data:
        raise ModelFormatError("the file is empty")
    head = data[:64].lstrip()
    if head[:1] == b"\x80" or head[:1] == b"x" and _is_zlib(data):
        raise ModelFormatError(
            "this is a Python pickle (or a compressed joblib/pickle file); SilvanForge "
            "never unpickles model files, since unpickling runs code. Save the model in "
            "its library's own format (XGBoost JSON/UBJSON, LightGBM text, ONNX) or pass "
            "the live object to silvanforge.load")
    if head[:1] == b"{":
        return "xgboost"  # JSON or UBJSON: both XGBoost's; the frontend tells them apart
    if head.startswith(b"tree") and head[4:5] in (b"\n", b"\r"):
        return "lightgbm"
    if head.startswith(b"binf") or data[:4] == b"\x00\x00\x00\x3f":
        raise UnsupportedModelError(
            "this looks like XGBoost's legacy binary format, which XGBoost itself no "
            "longer reads; load it with an older XGBoost and save it as JSON")
    if data[:1] == b"\x08":
        # ONNX ModelProto starts with field 1 (ir_version) as a varint: tag byte 0x08.
        return "onnx"
    raise ModelFormatError(
        "unrecognised model format: expected XGBoost JSON/UBJSON, a LightGBM text model "
        "or an ONNX model")


def _is_zlib(data: bytes) -> bool:
    try:
        zlib.decompressobj().decompress(data[:256])
        return True
    except zlib.error:
        return False


def load(source: Any) -> Forest:
    """Load a model file (path or bytes) or a live model object as a :class:`Forest`.

    Accepted: XGBoost JSON and UBJSON files, ``xgboost.Booster`` and ``XGBModel``;
    LightGBM text model files, ``lightgbm.Booster`` and ``LGBMModel``; fitted
    scikit-learn tree ensembles; ONNX-ML files and ``onnx.ModelProto``.

    >>> import silvanforge
    >>> forest = silvanforge.load("model.json")                 # doctest: +SKIP
    >>> forest = silvanforge.load(lgbm_classifier)              # doctest: +SKIP
    """
    if isinstance(source, Forest):
        return source
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        scanner = None
        try:
            try:
                with open(path, "rb") as fh:
                    if os.fstat(fh.fileno()).st_size >= number_scan.PREPARE_BYTES:
                        scanner = number_scan.prepare()  # built while the file is read
                    data = fh.read()
            except OSError as exc:
                raise ModelFormatError(f"{path}: cannot read the model file: "
                                       f"{exc.strerror or exc}") from None
            return _guarded(path, lambda: _load_bytes(data))
        finally:
            if scanner is not None:
                scanner.join()
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
        return _guarded("model bytes", lambda: _load_bytes(data))
    package = type(source).__module__.split(".")[0]
    if package in _OBJECT_FRONTENDS:
        module = _frontend(_OBJECT_FRONTENDS[package])
        return _guarded(type(source).__name__, lambda: module.load_object(source))
    raise UnsupportedModelError(
        f"cannot load a {type(source).__module__}.{type(source).__qualname__}: expected a "
        f"path, bytes, or an XGBoost, LightGBM, scikit-learn or ONNX model")


def _load_bytes(data: bytes) -> Forest:
    return _frontend(detect_format(data)).load_bytes(data)


def _guarded(what: str, thunk: Any) -> Forest:
    """Run a frontend; name ``what`` in its errors and turn parser crashes into ours."""
    try:
        with _ordinary_pages():
            return thunk()
    except SilvanForgeError as exc:
        raise type(exc)(f"{what}: {exc}") from exc.__cause__
    except (KeyError, IndexError, TypeError, ValueError, AttributeError, OverflowError,
            UnicodeDecodeError, RecursionError, MemoryError) as exc:
        raise ModelFormatError(f"{what}: malformed model ({type(exc).__name__}: {exc})") \
            from exc


# numpy's switch for transparent huge pages on its large arrays (numpy >= 1.20, named in
# its release notes); the loads in progress, and the setting they found.
_PAGES_LOCK = threading.Lock()
_pages = {"loads": 0, "before": True}


def _hugepage_switch() -> Any:
    for module in ("numpy._core.multiarray", "numpy.core.multiarray"):
        try:
            return importlib.import_module(module)._set_madvise_hugepage
        except (ImportError, AttributeError):
            continue
    return None


@contextlib.contextmanager
def _ordinary_pages() -> Iterator[None]:
    """numpy's large arrays in ordinary pages while models load: a load fills its
    buffers once, front to back, and the huge pages numpy asks for cost it more system
    time than they save (docs/ARCHITECTURE.md "Loading big models"). The first load to
    start turns them off, the last to end restores numpy's setting; a numpy without the
    switch keeps its own."""
    switch = _hugepage_switch()
    if switch is None:
        yield
        return
    with _PAGES_LOCK:
        if _pages["loads"] == 0:
            _pages["before"] = switch(False)
        _pages["loads"] += 1
    try:
        yield
    finally:
        with _PAGES_LOCK:
            _pages["loads"] -= 1
            if _pages["loads"] == 0:
                switch(_pages["before"])
