"""The one place a YAML file is parsed: `read_yaml`, strict and bounded.

Every reader of user and bundled files (instances, part files, plans, events, the GPU catalogue,
calibration rows) parses through here, so each limit holds for all of them and a problem is one
`InstanceError(path, field, problem, fix)` naming the file and the line.

Limits, each refused with one `InstanceError` before it can cost time or memory: a file over
MAX_FILE_BYTES (16 MiB; 64 MiB for calibration rows) is refused before it is read; a YAML
document nested more than MAX_YAML_DEPTH (100) levels, or holding more than MAX_YAML_NODES
(100,000; 200,000 for calibration rows) nodes once aliases and '<<' merges are expanded
("billion laughs"), while it is parsed; so are cyclic aliases, duplicate keys and integer
literals over 100 digits. Keys must be printable one-line strings, so every message stays on
one line.
"""

from __future__ import annotations

from collections.abc import Hashable
from pathlib import Path
from typing import Any

import yaml

from paraplan.cost.errors import InstanceError
from paraplan.cost.user_text import read_text_file
from paraplan.cost.hf_layout import shown as _shown


# Input limits (module docstring, "Limits"): far beyond any real file, small enough that a
# hostile or mistaken one is refused in well under a second and a few tens of MiB of memory.
MAX_FILE_BYTES = 16 * 2**20  # instances, part files, plans, the GPU catalogue
MAX_CALIBRATION_BYTES = 64 * 2**20  # calibration rows (cost/calibration.py, load_rows)
MAX_YAML_NODES = 100_000  # a large instance has about 150
MAX_CALIBRATION_NODES = 200_000  # the 214 published rows have about 15,000
MAX_YAML_DEPTH = 100  # instances nest 4 levels
_MAX_INT_DIGITS = 100  # longer integers are typos, and Python refuses to print > 4,300 digits


class _DuplicateKeyError(yaml.constructor.ConstructorError):
    pass


class _LimitError(yaml.MarkedYAMLError):
    """The document is deeper, or expands to more nodes, than a planning file ever needs."""

    def __init__(self, problem: str, mark, *, whole_file: bool = False):
        super().__init__(problem=problem, problem_mark=mark)
        self.whole_file = whole_file


class _BoundedComposer(yaml.composer.Composer):
    """PyYAML's composer, refusing documents nested deeper than MAX_YAML_DEPTH or holding more
    than `max_nodes` nodes once aliases are expanded.

    Every alias counts as the whole node it names, which is what a consumer walking the data
    sees: a "billion laughs" file of ten short lines names 10**9 nodes, and '<<' merges copy
    the merged entries for real. Such documents are refused while being composed, before
    they cost memory; an alias inside the node it names (a cycle) is refused too.
    """

    max_nodes = MAX_YAML_NODES

    def __init__(self):
        yaml.composer.Composer.__init__(self)
        self._depth = 0
        self._nodes = 0
        self._nodes_under_anchor: dict[str, int] = {}

    def compose_node(self, parent, index):
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            if event.anchor in self.anchors:  # else the base class reports the undefined alias
                nodes = self._nodes_under_anchor.get(event.anchor)
                if nodes is None:
                    raise _LimitError(f"alias *{event.anchor} is inside the node it refers to"
                                      " (a cycle)", event.start_mark)
                self._count(nodes, event)
            return super().compose_node(parent, index)
        if self._depth >= MAX_YAML_DEPTH:
            raise _LimitError(f"nested more than {MAX_YAML_DEPTH} levels deep",
                              event.start_mark)
        before = self._nodes
        self._count(1, event)
        self._depth += 1
        node = super().compose_node(parent, index)
        self._depth -= 1
        if event.anchor is not None:
            self._nodes_under_anchor[event.anchor] = self._nodes - before
        return node

    def _count(self, nodes: int, event) -> None:
        self._nodes += nodes
        if self._nodes > self.max_nodes:
            raise _LimitError(f"more than {self.max_nodes:,} nodes once aliases are expanded",
                              event.start_mark, whole_file=True)


# libyaml's parser (C) where PyYAML was built with it: the pure-Python one reads ~1 MiB/s.
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _StrictLoader(_BoundedComposer, _SAFE_LOADER):
    """A bounded SafeLoader that also refuses duplicate keys (PyYAML silently lets the last
    win) and integers too long to be a size, and reports where a tagged value
    (`!!timestamp 2024-13-45`) cannot be constructed."""

    def __init__(self, stream):
        _SAFE_LOADER.__init__(self, stream)
        _BoundedComposer.__init__(self)

    def construct_object(self, node, deep=False):
        try:
            return super().construct_object(node, deep)
        except yaml.YAMLError:
            raise
        except (ValueError, TypeError, KeyError, IndexError, AttributeError) as e:
            # PyYAML's scalar constructors fail so on a mistyped explicit tag: `!!int abc`
            value = _shown(node.value) if isinstance(node, yaml.ScalarNode) else f"a {node.id}"
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot read {value} as {node.tag.rsplit(':', 1)[-1]}"
                f" ({type(e).__name__})", node.start_mark) from None

    def construct_mapping(self, node, deep=False):
        if not isinstance(node, yaml.MappingNode):  # `!!set 0`: the base class says so
            return super().construct_mapping(node, deep)
        seen = set()
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag.endswith(":merge"):
                continue  # '<<' merges may legitimately repeat keys they override
            key = self.construct_object(key_node)
            if not isinstance(key, Hashable):  # `!!set : 1`: the base class reports it
                continue
            if key in seen:
                raise _DuplicateKeyError(None, None, f"duplicate key {_shown(key)}",
                                         key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)

    def construct_yaml_int(self, node):
        if len(node.value) > _MAX_INT_DIGITS:
            raise yaml.constructor.ConstructorError(
                None, None, f"an integer of {len(node.value):,} digits", node.start_mark)
        return super().construct_yaml_int(node)


_StrictLoader.add_constructor("tag:yaml.org,2002:int", _StrictLoader.construct_yaml_int)


class _CalibrationLoader(_StrictLoader):
    max_nodes = MAX_CALIBRATION_NODES


def read_yaml(path: str | Path, *, calibration: bool = False) -> Any:
    """The data in the YAML file `path`, within the documented limits (module docstring);
    `calibration`: a calibration file, whose limits are larger."""
    name = str(path)
    text = read_text_file(path, MAX_CALIBRATION_BYTES if calibration else MAX_FILE_BYTES)
    loader = _CalibrationLoader if calibration else _StrictLoader
    try:
        data = yaml.load(text, Loader=loader)
    except _DuplicateKeyError as e:
        raise InstanceError(name, _where(e), str(e.problem),
                            "keep only one of the two entries") from None
    except _LimitError as e:
        raise InstanceError(name, "<file>" if e.whole_file else _where(e), e.problem,
                            "give an ordinary planning file; it needs no deep nesting and few"
                            " aliases") from None
    except yaml.YAMLError as e:
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        if "nesting depth" in problem:  # newer PyYAML (6.0.4 here) stops a deep
            # document at its own depth limit, 1,000, before the composer's count reaches ours
            raise InstanceError(name, _where(e), f"nested more than {MAX_YAML_DEPTH} levels deep",
                                "give an ordinary planning file; it needs no deep nesting and"
                                " few aliases") from None
        raise InstanceError(name, _where(e), f"malformed YAML: {problem}",
                            "fix the YAML syntax there; indentation, a missing ':' or an unclosed"
                            " quote are the usual causes") from None
    except RecursionError:  # PyYAML flattens chains of '<<' merges recursively; the node
        # limit keeps chains short, this is for a caller that is itself deep in recursion
        raise InstanceError(name, "<file>", "'<<' merges nested too deeply",
                            "merge fewer levels of mappings") from None
    if data is None:
        raise InstanceError(name, "<file>", "file is empty",
                            "write the mapping described in docs/schema.md")
    return data


def _where(e: yaml.YAMLError) -> str:
    mark = getattr(e, "problem_mark", None)
    return f"line {mark.line + 1}, column {mark.column + 1}" if mark else "<file>"
