"""The pages of the manual, README.md and docs/*.md, and their fenced blocks."""

import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.glob("*.md"))]


def fenced_blocks(page):
    """``(language, text)`` of every fenced block of a page, in order."""
    blocks, language, lines = [], None, []
    for line in page.read_text().splitlines(keepends=True):
        if line.startswith("```"):
            if language is None:
                language, lines = line[3:].strip(), []
            else:
                blocks.append((language, "".join(lines)))
                language = None
        elif language is not None:
            lines.append(line)
    assert language is None, f"unclosed fenced block in {page.name}"
    return blocks


def python_blocks(page):
    """The text of each Python block of a page, in order."""
    return [text for language, text in fenced_blocks(page) if language == "python"]
