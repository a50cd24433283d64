"""Sphinx configuration of fastad's manual: MyST Markdown pages and an API reference
generated from the numpydoc docstrings of ``import fastad as fa``.

Build with ``sphinx-build -W --keep-going -b html docs <folder>`` after
``pip install -e ".[docs]"``.
"""

project = "fastad"
author = "fastad's authors"
copyright = "fastad's authors"  # noqa: A001  (Sphinx's setting name)

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "numpydoc",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]

# Headings become link targets, so pages can link to a section.
myst_heading_anchors = 3

# The API reference: the docstrings are numpydoc; signatures keep their hints.
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False

html_theme = "alabaster"
