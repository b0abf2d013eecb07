"""README.md tells the truth: each ```python block runs as written, and its links
stay inside the repository.

The ```cpp blocks are compiled and run by CTest (readme_cpp_snippet_<n>, from
cmake/readme_snippets.cmake).
"""
import pathlib
import re
import urllib.parse

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def fenced_blocks(text, language):
    """(line number of the opening fence, code) for each ```language block."""
    blocks = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].strip() == "```" + language:
            start = i + 1
            end = start
            while end < len(lines) and lines[end].strip() != "```":
                end += 1
            assert end < len(lines), f"README.md:{i + 1}: ```{language} block is not closed"
            blocks.append((i + 1, "\n".join(lines[start:end]) + "\n"))
            i = end
        i += 1
    return blocks


PYTHON_BLOCKS = fenced_blocks(README.read_text(encoding="utf-8"), "python")


def test_the_readme_has_python_blocks():
    # Guards the extraction: the README shows SDPA, MHA, embeddings and training.
    assert len(PYTHON_BLOCKS) >= 3


@pytest.mark.parametrize("line,code", PYTHON_BLOCKS, ids=[f"line{n}" for n, _ in PYTHON_BLOCKS])
def test_python_block_runs(line, code, monkeypatch):
    for path in re.findall(r"""["'](models/[^"']+)["']""", code):
        if not (ROOT / path).exists():
            pytest.skip(f"{path} is missing; scripts/fetch_model.sh (or scripts/setup.sh) fetches it")
    if re.search(r"^import .*\btorch\b|^from torch\b", code, re.M):
        pytest.importorskip("torch")
    # The README's relative paths (models/...) are relative to the checkout.
    monkeypatch.chdir(ROOT)
    namespace = {"__name__": "__readme__"}
    exec(compile(code, f"{README}:{line}", "exec"), namespace)


LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_links_stay_inside_the_repository():
    text = README.read_text(encoding="utf-8")
    links = LINK.findall(text)
    assert links, "no links found: the pattern is out of date"
    outside = []
    for target in links:
        parsed = urllib.parse.urlsplit(target)
        if parsed.scheme or parsed.netloc:
            outside.append(f"{target} (a web address)")
            continue
        if not parsed.path:  # "#anchor" within the README
            continue
        resolved = (ROOT / urllib.parse.unquote(parsed.path)).resolve()
        if ROOT.resolve() not in resolved.parents and resolved != ROOT.resolve():
            outside.append(f"{target} (outside the repository)")
        elif not resolved.exists():
            outside.append(f"{target} (does not exist)")
    assert not outside, "README.md links to: " + ", ".join(outside)
