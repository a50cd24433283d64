"""The README's Python examples run and print what the README says they print."""

import contextlib
import io
import pathlib
import re

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def python_blocks():
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)


def test_readme_examples_run_and_print_their_comments():
    blocks = python_blocks()
    assert len(blocks) >= 3
    namespace = {}  # one namespace: the README is read top to bottom
    for block in blocks:
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(block, str(README), "exec"), namespace)
        # Every "print(...)  # expected" line must print its expected text.
        for expected in re.findall(r"print\(.*\)\s+#\s+(.*)", block):
            expected = expected.split("  (")[0].split("  #")[0].strip()
            if expected.startswith("id,"):  # describes the columns, not output
                continue
            assert expected in printed.getvalue(), (expected, printed.getvalue())
