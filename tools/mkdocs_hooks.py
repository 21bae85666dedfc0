"""MkDocs hooks (mkdocs.yml ``hooks:``).

The command-line reference, docs/cli.md, shows the help of ``silvanforge`` and of each of
its commands as argparse prints it, so the page cannot drift from the parser: the page's
line ``<!-- cli-help -->`` is replaced. The API reference, docs/api.md, is rendered by
mkdocstrings from docstrings written for Python's help() and doctest: ``DoctestFences``
(a griffe extension, mkdocs.yml) turns their ``>>>`` examples into code blocks without
the doctest directives, and ``on_page_content`` shows Sphinx roles (``:func:`x```) as
plain code.
"""

from __future__ import annotations

import argparse
import os
import re

import griffe

MARKER = "<!-- cli-help -->"
ROLE = re.compile(r":(?:func|class|meth|mod|attr|data|exc|obj):(<code>)~?")
DIRECTIVE = re.compile(r"\s*#\s*doctest:.*$")
# argparse wraps to $COLUMNS: fixed, so the page does not depend on the terminal
WIDTH = "88"


def cli_reference() -> str:
    """Markdown: the top-level help, then a section per command with its help."""
    from silvanforge.cli import build_parser

    columns = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH
    try:
        parser = build_parser()
        commands = next(a for a in parser._actions
                        if isinstance(a, argparse._SubParsersAction)).choices
        parts = [f"```text\n{parser.format_help().rstrip()}\n```"]
        for name, sub in commands.items():
            help_text = sub.format_help().rstrip()
            parts.append(f"## silvanforge {name}\n\n```text\n{help_text}\n```")
    finally:
        if columns is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = columns
    return "\n\n".join(parts)


def on_page_markdown(markdown: str, page, **kwargs) -> str:
    if page.file.src_uri == "cli.md":
        if MARKER not in markdown:
            raise ValueError(f"docs/cli.md lost its {MARKER} line")
        markdown = markdown.replace(MARKER, cli_reference())
    return markdown


def on_page_content(html: str, page, **kwargs) -> str:
    if page.file.src_uri == "api.md":
        html = ROLE.sub(r"\1", html)
    return html


def fence_doctests(text: str) -> str:
    """Each run of ``>>>`` lines (with their continuation and output lines, up to a blank
    line) as a ``pycon`` code block, doctest directives removed."""
    out: list[str] = []
    in_example = False
    for line in text.splitlines():
        if line.lstrip().startswith(">>>") and not in_example:
            out.append("```pycon")
            in_example = True
        elif in_example and not line.strip():
            out.append("```")
            in_example = False
        out.append(DIRECTIVE.sub("", line) if in_example else line)
    if in_example:
        out.append("```")
    return "\n".join(out)


class DoctestFences(griffe.Extension):
    def on_instance(self, *, obj, **kwargs) -> None:
        if obj.docstring is not None and ">>>" in obj.docstring.value:
            obj.docstring.value = fence_doctests(obj.docstring.value)
