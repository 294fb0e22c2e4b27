#!/usr/bin/env python3
"""Import graph of the library's files from their `use crate::` and `use super::` lines
(and `crate::a::b`, `super::a` paths in code): prints every import cycle between files, then every one between the
top-level modules of src/ (a folder taken whole, or a file), one per line, and nothing when
there is none. With `--long N`, instead lists the functions longer than N lines and the
files longer than 800 lines (binaries included, tests apart), and fails if there is one.

A path `crate::a::b::C` names the file src/a/b.rs, else src/a/b/mod.rs, else src/a.rs or
src/a/mod.rs (the longest prefix that is a file); `super::` paths are read from the
module's parent. Binaries (src/bin) and files of tests only are not part of it.
"""
import pathlib
import re
import sys

args = sys.argv[1:]
long_limit = None
# No library file is longer than this, tests apart.
LONGEST_FILE = 800
if args[:1] == ["--long"]:
    long_limit = int(args[1])
    args = args[2:]
root = pathlib.Path(args[0] if args else "src")
files = [p for p in root.rglob("*.rs") if "bin" not in p.relative_to(root).parts]


def module_of(parts):
    """The file a `crate::` path names (longest existing prefix)."""
    for n in range(len(parts), 0, -1):
        base = root.joinpath(*parts[:n])
        for cand in (base.with_suffix(".rs"), base / "mod.rs"):
            if cand.exists():
                return cand
    return None


def strip_tests(text):
    """Drops `#[cfg(test)] mod tests { ... }` blocks: tests may import anything."""
    m = re.search(r"#\[cfg\(test\)\]\s*mod \w+\s*\{", text)
    return text[: m.start()] if m else text


def is_test_file(f):
    """A file that holds tests only: under a `tests` folder, or named `tests.rs`."""
    return "tests" in f.relative_to(root).parts[:-1] or f.name == "tests.rs"


if long_limit is not None:
    found = 0
    for f in sorted(root.rglob("*.rs")):
        if is_test_file(f):
            continue
        lines = strip_tests(f.read_text()).splitlines()
        if len(lines) > LONGEST_FILE:
            print(f"long file: {f} ({len(lines)} lines outside tests)")
            found += 1
        i = 0
        while i < len(lines):
            m = re.match(r"^(\s*)(pub(\([^)]*\))? )?(async )?(const )?fn (\w+)", lines[i])
            if m and not lines[i].rstrip().endswith(";"):
                indent = m.group(1)
                j = i + 1
                while j < len(lines) and not re.match(rf"^{indent}\}}", lines[j]):
                    j += 1
                if j - i + 1 > long_limit:
                    print(f"long function: {f}:{i + 1} {m.group(6)} ({j - i + 1} lines)")
                    found += 1
                i = j
            i += 1
    sys.exit(1 if found else 0)

# Names the crate root re-exports (`pub use a::b::{X, Y};` in lib.rs): `crate::X` is then an
# import of the module that defines X, not of lib.rs.
reexports = {}
lib = root / "lib.rs"
if lib.exists():
    for m in re.finditer(r"^pub use ((?:\w+::)*)(?:\{([^}]*)\}|(\w+));", lib.read_text(), re.M):
        path = [p for p in m.group(1).split("::") if p]
        for name in re.split(r",\s*", m.group(2) or m.group(3)):
            name = name.strip()
            if name and path:
                reexports[name] = path + [name]

def module_path(f):
    """The module path of file `f` under src/: `a/b.rs` and `a/b/mod.rs` are `[a, b]`."""
    parts = list(f.relative_to(root).with_suffix("").parts)
    return parts[:-1] if parts[-1] in ("mod", "lib") else parts


def imported_heads(path, braced):
    """The paths one import names: `path` itself, and `path::item` for each item of a
    braced list (its first segment)."""
    heads = [path] if path else []
    for item in re.split(r",\s*", braced or ""):
        item = item.strip().split(" ")[0]
        if item and item not in ("self", "*"):
            heads.append(path + item.split("::")[:1])
    return heads


graph = {}
use_re = re.compile(r"\bcrate::((?:\w+::)*\w+)(::\{([^;]*?)\})?", re.S)
# `super::a::b`, `super::{a, b::C}`, `super::super::a`.
super_re = re.compile(r"\b((?:super::)+)((?:\w+::)*\w+)?(\{([^;]*?)\})?", re.S)
for f in files:
    if is_test_file(f):
        continue
    text = strip_tests(f.read_text())
    # Doc comments and `//` comments are no imports.
    code = "\n".join(l for l in text.splitlines() if not l.lstrip().startswith("//"))
    deps = set()
    heads = []
    for m in use_re.finditer(code):
        heads += imported_heads(m.group(1).split("::"), m.group(3))
    here = module_path(f)
    for m in super_re.finditer(code):
        ups = m.group(1).count("super::")
        base = here[: len(here) - ups]
        rest = m.group(2).rstrip(":").split("::") if m.group(2) else []
        heads += [base + h for h in imported_heads(rest, m.group(4))]
    for h in heads:
        if h and h[0] in reexports:
            h = reexports[h[0]] + h[1:]
        target = module_of(h) if h else None
        if target and target != f:
            deps.add(target)
    # A `mod.rs` declares its children: that is no import of them.
    graph[f] = deps

# Tarjan's strongly connected components.
index, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]
sys.setrecursionlimit(10000)


def visit(v):
    index[v] = low[v] = counter[0]
    counter[0] += 1
    stack.append(v)
    on.add(v)
    for w in graph.get(v, ()):
        if w not in index:
            visit(w)
            low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        comp = []
        while True:
            w = stack.pop()
            on.discard(w)
            comp.append(w)
            if w == v:
                break
        if len(comp) > 1:
            sccs.append(comp)


def cycles(g):
    """The strongly connected components of more than one vertex of graph `g`."""
    index.clear(), low.clear(), stack.clear(), on.clear(), sccs.clear()
    counter[0] = 0
    global graph
    graph = g
    for v in sorted(g):
        if v not in index:
            visit(v)
    return [sorted(c) for c in sccs]


def top(path):
    """The top-level module a file belongs to: its folder under src/, or the file itself."""
    parts = path.relative_to(root).parts
    return parts[0] if len(parts) > 1 else parts[0].removesuffix(".rs")


files_graph = graph
for comp in cycles(files_graph):
    names = sorted(str(p.relative_to(root.parent)) for p in comp)
    print(f"cycle of {len(comp)} files: " + ", ".join(names))
folders = {}
for f, deps in files_graph.items():
    folders.setdefault(top(f), set()).update(top(d) for d in deps if top(d) != top(f))
for comp in cycles(folders):
    print(f"cycle of {len(comp)} top-level modules: " + ", ".join(comp))
