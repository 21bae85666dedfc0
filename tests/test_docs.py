"""The documentation site (mkdocs.yml): the quickstarts' code runs and agrees with each
library, and the pieces the build generates (the CLI reference, the docstring examples as
code blocks) come out whole. `mkdocs build --strict` itself runs in CI (.ci/run)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)

# Each quickstart and the libraries its code imports (all in the dev extra).
QUICKSTARTS = {
    "quickstart-xgboost.md": ["xgboost"],
    "quickstart-lightgbm.md": ["lightgbm"],
    "quickstart-sklearn.md": ["sklearn"],
    "quickstart-onnx.md": ["onnx", "onnxruntime", "skl2onnx", "sklearn"],
}


# Other pages whose python blocks run the same way.
RUNNABLE = {**QUICKSTARTS, "OUTPUTS.md": ["xgboost", "lightgbm", "sklearn"],
            "CONTRIBS.md": ["xgboost", "lightgbm", "sklearn", "shap"]}


def test_every_quickstart_is_tested():
    assert sorted(p.name for p in DOCS.glob("quickstart-*.md")) == sorted(QUICKSTARTS)


@pytest.mark.parametrize("page", sorted(RUNNABLE))
def test_quickstart_runs(page, tmp_path, monkeypatch):
    """The page's python blocks, in order, as one program in an empty directory: each
    trains its own model and asserts SilvanForge's predictions equal the library's."""
    for module in RUNNABLE[page]:
        pytest.importorskip(module, reason=f"{module} is part of the dev extra")
    blocks = FENCE.findall((DOCS / page).read_text())
    assert blocks and any("assert" in b for b in blocks)
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__quickstart__"}
    for block in blocks:
        exec(compile(block, f"{page}", "exec"), namespace)


def _hooks():
    pytest.importorskip("griffe", reason="mkdocstrings' griffe is part of the dev extra")
    path = ROOT / "tools" / "mkdocs_hooks.py"
    spec = importlib.util.spec_from_file_location("mkdocs_hooks", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cli_reference_has_every_command_and_option():
    text = _hooks().cli_reference()
    for name in ("demo", "inspect", "compile", "predict", "bench", "tune"):
        assert f"## silvanforge {name}\n\n```text\nusage: silvanforge {name}" in text
    assert "--predictor" in text and "--recompile" in text and "-o OUT, --out OUT" in text
    assert text.count("```") % 2 == 0


def test_docstring_examples_become_code_blocks():
    fence = _hooks().fence_doctests
    text = ("Compile it.\n\n>>> p = compile(m)   # doctest: +SKIP\n>>> p.n_outputs\n1\n\n"
            "After.\n\n>>> x = 1")
    assert fence(text) == ("Compile it.\n\n```pycon\n>>> p = compile(m)\n>>> p.n_outputs\n"
                           "1\n```\n\nAfter.\n\n```pycon\n>>> x = 1\n```")
