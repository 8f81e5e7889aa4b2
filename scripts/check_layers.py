#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Checks that the C sources' includes run only downward and form no circle.

daemon/ has one folder per layer; a file may include headers of its own
folder and of the folders below it (LAYERS, lowest first; folders on one
line are side by side and may not include each other), and daemon/main.c
may include anything. common/, the command-line code tractd and tractctl
share, is the lowest layer; client/ (tractctl) stands apart from daemon/
and may include only what APART lets it. Between modules (a .c and its .h)
includes must not form a circle, within a folder as across. Prints each
violation and exits with 1, else prints the include counts per pair of
folders and exits 0.

Usage: scripts/check_layers.py [REPO_ROOT]   (default: .)
"""
import re
import sys
from collections import Counter
from pathlib import Path

LAYERS = [["common"], ["base"], ["formats"], ["models"], ["job"], ["engine", "demo"], ["run"],
          ["server"]]
# Folders outside daemon/'s layers, and the only ones each may include.
APART = {"client": {"common"}}
TOP_FOLDERS = {"common", "client"}   # at the repository's root, not under daemon/
RANK = {folder: rank for rank, folders in enumerate(LAYERS) for folder in folders}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def module_of(root, path):
    """(folder, module) of a source file; folder "" for daemon/main.c."""
    rel = path.relative_to(root)
    if rel.parts[0] in TOP_FOLDERS:
        return (rel.parts[0], path.stem)
    return (rel.parts[1] if len(rel.parts) > 2 else "", path.stem)


def includes(root, path):
    """The project's headers path includes, as (folder, module): "x.h" beside
    it, "layer/x.h" under daemon/ (-Idaemon), "common/x.h" from the root."""
    found = []
    for name in INCLUDE.findall(path.read_text()):
        for target in (path.parent / name, root / "daemon" / name, root / name):
            if target.suffix == ".h" and target.exists():
                found.append(module_of(root, target))
                break
    return found


def misplaced(here, there):
    """Why folder here may not include folder there, or None."""
    if here in APART or there in APART:
        if there in APART.get(here, ()):
            return None
        return f"which {here}/ may not include"
    if RANK[there] >= RANK[here]:
        return f"which is not below {here}/"
    return None


def sources(root):
    for folder in ["daemon", *sorted(TOP_FOLDERS)]:
        yield from sorted((root / folder).rglob("*.[ch]"))


def find_circle(graph):
    """A list of modules forming a circle in graph, or None."""
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                circle = visit(nxt)
                if circle:
                    return circle
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            circle = visit(node)
            if circle:
                return circle
    return None


def main():
    root = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    errors, pairs, graph = [], Counter(), {}
    for path in sources(root):
        here = module_of(root, path)
        if here[0] and here[0] not in RANK and here[0] not in APART:
            errors.append(f"{path}: folder {here[0]} is not in LAYERS")
            continue
        for there in includes(root, path):
            if there == here:
                continue
            graph.setdefault(here, set()).add(there)
            if not here[0] or here[0] == there[0]:
                continue
            pairs[(here[0], there[0])] += 1
            why = misplaced(here[0], there[0])
            if why:
                errors.append(f"{path}: includes {there[0]}/{there[1]}.h, {why}")
    circle = find_circle(graph)
    if circle:
        errors.append("includes form a circle: " +
                      " -> ".join(f"{f}/{m}" if f else m for f, m in circle))
    for e in errors:
        print(e)
    if errors:
        return 1
    for (a, b), n in sorted(pairs.items(), key=lambda kv: (RANK.get(kv[0][0], len(LAYERS)),
                                                          kv[0])):
        print(f"{a:8} -> {b:8} {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
