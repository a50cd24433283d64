"""The README's Python examples run and print what the README says they print.

Every ``print(...)`` call in a Python block whose closing line carries a
comment is checked: the comment (up to a two-space ``  (`` aside) must appear
in what that top-level statement printed. The call may span several lines
(the formatter splits long ones); the comment sits after its closing
parenthesis.
"""

import ast
import contextlib
import io
import pathlib
import subprocess
import sys
import tokenize

import pytest

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def python_blocks():
    return [text for language, text in fenced_blocks() if language == "python"]


def comments_by_line(source):
    """``{line number: comment text}`` of a block, from Python's own tokenizer."""
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return {
        token.start[0]: token.string.lstrip("#").strip()
        for token in tokens
        if token.type == tokenize.COMMENT
    }


def expected_outputs(statement, comments):
    """The expected text of every commented ``print`` call inside ``statement``."""
    for node in ast.walk(statement):
        is_print = (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "print"
        )
        comment = comments.get(node.end_lineno) if is_print else None
        if comment is None or comment.startswith("id,"):  # "id, op, ..." names columns
            continue
        yield comment.split("  (")[0].split("  #")[0].strip()


def test_expected_outputs_are_found_in_multi_line_prints():
    # The parser itself: a print split over lines is seen, an uncommented one is not.
    source = 'print(\n    "a",\n    "b",\n)  # a b\nprint("c")\nprint("d")  # d  (aside)\n'
    tree, comments = ast.parse(source), comments_by_line(source)
    found = [text for statement in tree.body for text in expected_outputs(statement, comments)]
    assert found == ["a b", "d"]


def test_readme_examples_run_and_print_their_comments():
    blocks = python_blocks()
    assert len(blocks) >= 3
    namespace = {}  # one namespace: the README is read top to bottom
    checked = 0
    for block in blocks:
        tree, comments = ast.parse(block, str(README)), comments_by_line(block)
        for statement in tree.body:
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):
                exec(compile(ast.Module([statement], []), str(README), "exec"), namespace)
            for expected in expected_outputs(statement, comments):
                assert expected in printed.getvalue(), (expected, printed.getvalue())
                checked += 1
    # Every commented print of the README, the multi-line ones included.
    assert checked >= 10


def fenced_blocks():
    """``(language, text)`` of every fenced block of the README, in order."""
    blocks, language, lines = [], None, []
    for line in README.read_text().splitlines(keepends=True):
        if line.startswith("```"):
            if language is None:
                language, lines = line[3:].strip(), []
            else:
                blocks.append((language, "".join(lines)))
                language = None
        elif language is not None:
            lines.append(line)
    assert language is None, "unclosed fenced block in README.md"
    return blocks


def output_blocks():
    """The README's plain fenced blocks: program output it shows."""
    return [text for language, text in fenced_blocks() if not language]


def shown_output(starting_with):
    (block,) = [block for block in output_blocks() if block.startswith(starting_with)]
    return block


def run_readme_blocks(until_containing):
    """Run the README's Python blocks in order up to the first holding the text."""
    namespace = {}
    with contextlib.redirect_stdout(io.StringIO()):
        for block in python_blocks():
            exec(compile(block, str(README), "exec"), namespace)
            if until_containing in block:
                return namespace
    raise AssertionError(f"no README block contains {until_containing!r}")


def test_every_shown_output_block_is_checked():
    # A new output block must get a check below (or in the test of its program).
    checked = [
        "     id  op",
        "$ python examples/train_two_layer.py",
        "$ python examples/train_mlp.py",
        "gradcheck failed",
        "node 3",
    ]
    starts = [[c for c in checked if block.startswith(c)] for block in output_blocks()]
    assert sorted(start for found in starts for start in found) == sorted(checked)
    assert all(len(found) == 1 for found in starts), output_blocks()


def test_shown_node_table_is_the_first_examples_table():
    namespace = run_readme_blocks("z.backward()")
    assert namespace["tape"].table() + "\n" == shown_output("     id  op")


def test_shown_gradcheck_message_is_printed_in_full():
    namespace = run_readme_blocks("wrong_gradient")
    result = namespace["fa"].gradcheck(
        namespace["loss"], [2.0, 3.0], grad=namespace["wrong_gradient"], raise_exception=False
    )
    assert result.message + "\n" == shown_output("gradcheck failed")


@pytest.mark.parametrize("name", ["train_two_layer", "train_mlp"])
def test_shown_training_output_is_what_the_example_prints(name):
    shown = shown_output(f"$ python examples/{name}.py").splitlines()
    example = README.parent / "examples" / f"{name}.py"
    printed = subprocess.run(
        [sys.executable, str(example)], capture_output=True, text=True, timeout=300, check=True
    ).stdout.splitlines()
    for line in shown[1:]:
        assert line == "..." or line in printed, line


def test_shown_debug_table_is_what_a_debug_tape_prints(tmp_path):
    # The README shows the report of a model.py whose lines 4 and 5 record
    # the nodes; write such a file and run it.
    model = tmp_path / "model.py"
    model.write_text(
        "import fastad as fa\n"
        "with fa.Tape(debug=True) as tape:\n"
        "    x = fa.var(0.0)\n"
        "    y = x * 3.0\n"
        "    z = fa.log(y) + 1.0\n"
        "try:\n"
        "    z.backward(check=True)\n"
        "except fa.NonFiniteError as error:\n"
        "    print(error)\n"
        "    print(tape.table(around=error.origin.node, context=2))\n"
    )
    printed = subprocess.run(
        [sys.executable, str(model)], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    assert printed == shown_output("node 3")
