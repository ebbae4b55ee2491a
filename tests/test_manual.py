"""`pytest-ondevice docs` and `pytest-ondevice nightly`: what a message points a user at."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from pytest_ondevice.commands import cli

REPO = Path(__file__).resolve().parents[1]


def test_docs_lists_the_pages_with_their_titles(capsys):
    assert cli.main(["docs"]) == 0
    out = capsys.readouterr().out
    assert "  farm                     A device farm" in out
    assert "transports/ssh" in out


def test_docs_prints_a_page_and_suggests_a_near_name(capsys):
    assert cli.main(["docs", "bench"]) == 0
    assert capsys.readouterr().out == (REPO / "docs" / "bench.md").read_text()
    assert cli.main(["docs", "bench.md#instrumented-builds-are-not-latency"]) == 0  # a link as the pages write it
    assert capsys.readouterr().out == (REPO / "docs" / "bench.md").read_text()
    assert cli.main(["docs", "benhc"]) == 2
    assert "no page 'benhc'; did you mean bench?" in capsys.readouterr().err


def test_nightly_writes_the_job_and_never_overwrites(tmp_path, capsys):
    assert cli.main(["nightly", str(tmp_path / "job")]) == 0
    assert (tmp_path / "job" / "run.sh").read_text() == (REPO / "examples" / "nightly" / "run.sh").read_text()
    (tmp_path / "job" / "farm.toml").write_text("# mine\n")
    assert cli.main(["nightly", str(tmp_path / "job")]) == 1
    assert "nothing was written" in capsys.readouterr().err
    assert (tmp_path / "job" / "farm.toml").read_text() == "# mine\n"


def test_no_message_of_the_package_points_at_a_checkout_s_docs():
    """An installed plugin has no docs/ or examples/ beside it: a string the code builds
    (docstrings and comments aside) names `pytest-ondevice docs PAGE` instead."""
    offenders = []
    for root in ("pytest_ondevice", "transports"):
        for path in (REPO / root).rglob("*.py"):
            tree = ast.parse(path.read_text())
            docstrings = {
                id(node.body[0].value)
                for node in ast.walk(tree)
                if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
                and node.body
                and isinstance(node.body[0], ast.Expr)
            }
            strings = [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
            for node in strings:
                if id(node) not in docstrings and re.search(r"\bdocs/[\w/-]+(\.md|/)|examples/", node.value):
                    offenders.append(f"{path.relative_to(REPO)}:{node.lineno}: {node.value}")
    assert offenders == []
