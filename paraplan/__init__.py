"""paraplan: provably optimal parallel training plans for transformer LLMs on GPU clusters.

The code lives in the repository's top-level folders (cost/, formulations/, solver/,
instances/), installed as the subpackages paraplan.cost, paraplan.formulations,
paraplan.solver and paraplan.instances (pyproject.toml's package-dir), so that a user's own
`cost.py` or `solver.py` cannot shadow them.
"""

import os as _os

# In a source checkout (an editable install, or the tests run from the repository root) the
# subpackages are this folder's siblings; in an installed wheel they sit inside it.
_root = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
if _os.path.isdir(_os.path.join(_root, "cost")) and _root not in __path__:
    __path__.append(_root)
