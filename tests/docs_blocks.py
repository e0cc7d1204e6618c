"""The fenced code blocks of the repository's markdown files (README.md, docs/*.md), in order."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<language>[\w+-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.M | re.S)


@dataclass(frozen=True)
class Block:
    document: Path
    line: int  # 1-based line of the opening fence
    language: str
    text: str

    @property
    def name(self) -> str:
        return f"{self.document.relative_to(ROOT)}:{self.line}"


def blocks(document: Path) -> list[Block]:
    """Every fenced block of ``document``: its language tag (empty when none) and its text, dedented."""
    source = document.read_text(encoding="utf-8")
    found = []
    for match in _FENCE.finditer(source):
        indent = len(match["indent"])
        text = "".join(line[indent:] if line[:indent].strip() == "" else line for line in match["body"].splitlines(True))
        found.append(Block(document, source.count("\n", 0, match.start()) + 1, match["language"].lower(), text))
    return found


def block_containing(document: Path, needle: str, *, language: str = "python") -> Block:
    """The one ``language`` block of ``document`` that holds ``needle``."""
    chosen = [block for block in blocks(document) if block.language == language and needle in block.text]
    assert len(chosen) == 1, (document, needle, [block.name for block in chosen])
    return chosen[0]
