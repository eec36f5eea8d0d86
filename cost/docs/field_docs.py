"""The docstrings of a record's fields, read from its module's source with `ast`.

A field's docstring is the string literal right after it in the class body (an attribute
docstring, PEP 257). Python compiles it to nothing, so the records carry no cost for it at run
time; only the docs generator (cost/docs/schema.py) and its tests parse the source. Its first
paragraph is the YAML key's meaning as docs/schema.md shows it; further paragraphs are for
readers of the code (how it is stored and priced).
"""

from __future__ import annotations

import ast
import inspect
import sys
from functools import lru_cache


@lru_cache(maxsize=None)
def _classes(path: str) -> dict[str, ast.ClassDef]:
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    return {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}


def _own_docs(cls: type) -> dict[str, str]:
    node = _classes(sys.modules[cls.__module__].__file__).get(cls.__name__)
    if node is None:
        return {}
    docs = {}
    for stmt, after in zip(node.body, node.body[1:]):
        if (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
                and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)):
            docs[stmt.target.id] = inspect.cleandoc(after.value.value)
    return docs


def field_docs(record: type) -> dict[str, str]:
    """Field name -> docstring for `record`'s fields, its base classes' included."""
    docs: dict[str, str] = {}
    for cls in reversed(record.__mro__[:-1]):  # object has no fields
        docs.update(_own_docs(cls))
    return docs


def summary(doc: str) -> str:
    """A docstring's first paragraph as one line: what the docs page shows."""
    return " ".join(doc.split("\n\n", 1)[0].split())
