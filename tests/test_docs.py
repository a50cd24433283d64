"""The examples of README.md and the manual (docs/*.md) run and print what the pages say.

Every ``print(...)`` call in a Python block whose closing line carries a
comment is checked: the comment (up to a two-space ``  (`` aside) must appear
in what that top-level statement printed. The call may span several lines
(the formatter splits long ones); the comment sits after its closing
parenthesis. Each page is read top to bottom in one namespace of its own.
"""

import ast
import contextlib
import functools
import io
import subprocess
import sys
import tokenize

import pytest
from pages import DOCS, PAGES, README, ROOT, fenced_blocks, python_blocks

import fastad


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


@functools.cache
def run_and_check(page):
    """Run a page's Python blocks in order; the number of commented prints checked
    (once per page and test run: the tests below share the result)."""
    namespace = {}  # one namespace per page: a page is read top to bottom
    checked = 0
    for block in python_blocks(page):
        tree, comments = ast.parse(block, str(page)), comments_by_line(block)
        for statement in tree.body:
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):
                exec(compile(ast.Module([statement], []), str(page), "exec"), namespace)
            for expected in expected_outputs(statement, comments):
                assert expected in printed.getvalue(), (page.name, expected, printed.getvalue())
                checked += 1
    return checked


def test_expected_outputs_are_found_in_multi_line_prints():
    # The parser itself: a print split over lines is seen, an uncommented one is not.
    source = 'print(\n    "a",\n    "b",\n)  # a b\nprint("c")\nprint("d")  # d  (aside)\n'
    tree, comments = ast.parse(source), comments_by_line(source)
    found = [text for statement in tree.body for text in expected_outputs(statement, comments)]
    assert found == ["a b", "d"]


def test_the_pages_are_found():
    names = {page.name for page in PAGES}
    assert {"README.md", "index.md", "performance.md", "design.md"} <= names


@pytest.mark.parametrize("page", PAGES, ids=[page.name for page in PAGES])
def test_examples_run_and_print_their_comments(page):
    run_and_check(page)


def test_readme_examples_run_and_print_their_comments():
    assert len(python_blocks(README)) >= 1
    assert run_and_check(README) >= 2  # the ten-line example


def test_every_commented_print_is_checked():
    # Every commented print of the pages, the multi-line ones included: the
    # 21 the README held when it was the whole manual, or more.
    counts = {page.name: run_and_check(page) for page in PAGES if python_blocks(page)}
    assert sum(counts.values()) >= 21, counts


def output_blocks():
    """The pages' plain fenced blocks: program output they show."""
    return [text for page in PAGES for language, text in fenced_blocks(page) if not language]


def shown_output(starting_with):
    (block,) = [block for block in output_blocks() if block.startswith(starting_with)]
    return block


def run_page_blocks(page, until_containing):
    """Run a page's Python blocks in order up to the first holding the text."""
    namespace = {}
    with contextlib.redirect_stdout(io.StringIO()):
        for block in python_blocks(page):
            exec(compile(block, str(page), "exec"), namespace)
            if until_containing in block:
                return namespace
    raise AssertionError(f"no block of {page.name} contains {until_containing!r}")


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
    namespace = run_page_blocks(README, "z.backward()")
    assert namespace["tape"].table() + "\n" == shown_output("     id  op")


def test_shown_gradcheck_message_is_printed_in_full():
    namespace = run_page_blocks(DOCS / "gradcheck.md", "wrong_gradient")
    result = namespace["fa"].gradcheck(
        namespace["loss"], [2.0, 3.0], grad=namespace["wrong_gradient"], raise_exception=False
    )
    assert result.message + "\n" == shown_output("gradcheck failed")


@pytest.mark.parametrize("name", ["train_two_layer", "train_mlp"])
def test_shown_training_output_is_what_the_example_prints(name):
    shown = shown_output(f"$ python examples/{name}.py").splitlines()
    example = ROOT / "examples" / f"{name}.py"
    printed = subprocess.run(
        [sys.executable, str(example)], capture_output=True, text=True, timeout=300, check=True
    ).stdout.splitlines()
    for line in shown[1:]:
        assert line == "..." or line in printed, line


def test_shown_debug_table_is_what_a_debug_tape_prints(tmp_path):
    # The manual shows the report of a model.py whose lines 4 and 5 record
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


def test_readme_is_a_front_page():
    assert len(README.read_text().splitlines()) <= 250


def test_readme_links_reach_the_pages():
    text = README.read_text()
    for page in DOCS.glob("*.md"):
        if page.name != "index.md":
            assert f"(docs/{page.name})" in text, page.name


def test_the_api_reference_has_every_public_name():
    text = (DOCS / "api.rst").read_text()
    documented = {
        line.split("::", 1)[1].strip().rsplit(".", 1)[-1]  # a module by its last name
        for line in text.splitlines()
        if line.startswith(".. auto") and "::" in line
    }
    assert set(fastad.__all__) <= documented, set(fastad.__all__) - documented
