"""Examples of the docs that claim to run as written do: each is extracted and run."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[3]


def _block_after(doc: Path, heading: str) -> str:
    """The first fenced Python block of ``doc`` under ``heading``."""
    text = doc.read_text(encoding="utf-8")
    section = text[text.index(heading):]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match is not None, f"no python block under {heading!r} in {doc.name}"
    return match[1]


def test_the_handler_test_of_runtime_md_runs_as_written(tmp_path: Path) -> None:
    """docs/runtime.md's "Testing your handlers" file MUST pass under pytest as written."""
    pytest.importorskip("tasks_store_memory")
    example = tmp_path / "test_handler_example.py"
    example.write_text(_block_after(REPOSITORY / "docs" / "runtime.md",
                                    "## Testing your handlers"), encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(example)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert 0 == proc.returncode, proc.stdout + proc.stderr
    assert "1 passed" in proc.stdout
