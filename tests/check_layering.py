#!/usr/bin/env python3
"""check_layering.py: what the source tree's own structure promises.

  check_layering.py includes ROOT
      The folders of compiler/, grammar/, runtime/, sched/ and util/ include each
      other without a circle: for every two folders, at most one includes
      the other, directly or through others, so each folder reads as a
      layer above those it includes. An include is resolved as the
      compiler resolves it: from the including file's folder, then from the
      repository root (#include "sched/load.h"), then by its name where the
      tree holds one file of that name (the CUDA kernels' own includes).
      A circle is printed with one include that makes each of its steps.

  check_layering.py comment-paths ROOT
      Every path a comment under those five folders names, "dir/file.ext",
      exists: from the repository root, or from the commenting file's
      folder or one above it ("backends/cpu/vec.h" in runtime/). A path
      whose folder is none of this tree's (torch/distributed/..., a
      Hugging Face or OpenBLAS file) is another project's and is not
      checked, nor is one followed by ":line" (a diagnostic shown as an
      example) or one from "./" or "../" (a path as a user writes it).

  check_layering.py calls LIBRARY.a ...
      No two files of the built static libraries call each other, directly
      or through others: the graph from each object file to the object
      files defining the symbols it uses (nm) has no circle, so every file
      reads as a layer above the files it calls. A circle is printed with
      its files and one symbol that makes each of its steps. The one
      allowed circle is the generated lexer.c and parser.c (ALLOWED_CALL_CIRCLES
      says why).

Exit status 0 when the tree keeps the promise, 1 with what breaks it.
"""
import os
import re
import subprocess
import sys

LIBRARIES = ("compiler", "grammar", "runtime", "sched", "util")
SOURCES = (".c", ".h", ".cc", ".cpp", ".cu", ".cuh", ".y", ".l", ".def")
INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.M)


def source_files(root):
    for lib in LIBRARIES:
        for folder, _, names in os.walk(os.path.join(root, lib)):
            for name in sorted(names):
                if name.endswith(SOURCES):
                    yield os.path.relpath(os.path.join(folder, name), root)


def include_graph(root):
    """folder -> {folder it includes: (file, include) that shows it}"""
    files = list(source_files(root))
    by_name = {}
    for f in files:
        by_name.setdefault(os.path.basename(f), []).append(f)
    edges = {}
    for f in files:
        with open(os.path.join(root, f), encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        here = os.path.dirname(f)
        for inc in INCLUDE.findall(text):
            target = None
            for candidate in (os.path.join(here, inc), inc):
                if os.path.isfile(os.path.join(root, candidate)):
                    target = os.path.normpath(candidate)
                    break
            if target is None and len(by_name.get(os.path.basename(inc), [])) == 1:
                target = by_name[os.path.basename(inc)][0]
            if target is None:
                continue   # a system, generated or test stand-in header
            there = os.path.dirname(target)
            if there != here and there.split(os.sep)[0] in LIBRARIES:
                edges.setdefault(here, {}).setdefault(there, (f, inc))
    return edges


def strong_groups(edges):
    """The strongly connected sets of more than one node (Tarjan): the
    nodes that reach each other, directly or through others."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    counter = [0]

    def connect(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, {})):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(group)

    for v in sorted(edges):
        if v not in index:
            connect(v)
    return found


def shortest_circle(group, edges):
    """The shortest way from the group's first node back to it inside the
    group (breadth first), both ends included."""
    start = min(group)
    back = {start: None}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(edges.get(v, {})):
            if w not in group:
                continue
            if w == start:
                path = [v]
                while back[path[-1]] is not None:
                    path.append(back[path[-1]])
                path.reverse()
                return path + [start]
            if w not in back:
                back[w] = v
                queue.append(w)
    return None


def circles(edges):
    """One circle through each strongly connected set of nodes."""
    return [shortest_circle(group, edges) for group in strong_groups(edges)]


def check_includes(root):
    edges = include_graph(root)
    bad = circles(edges)
    for circle in bad:
        print("include circle: " + " -> ".join(circle))
        for a, b in zip(circle, circle[1:]):
            f, inc = edges[a][b]
            print('  %s -> %s: %s includes "%s"' % (a, b, f, inc))
    if bad:
        print("Move what both sides need below both (a header of its own), or the file that "
              "needs the upper folder up into it (docs/architecture.md, the libraries).")
    return 1 if bad else 0


COMMENT = re.compile(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])\'', re.S)
HASH_COMMENT = re.compile(r'#[^\n]*')
PATH = re.compile(r'(?<![\w./~-])((?:[\w.-]+/)+[\w.-]+\.(?:c|h|cc|cpp|cu|cuh|y|l|def|py|sh|md|json|plan|model|txt|cmake))'
                  r'(?![\w/-])(:[0-9])?')


def comments(name, text):
    """(line, text) of each comment."""
    pattern = HASH_COMMENT if name == "CMakeLists.txt" else COMMENT
    for m in pattern.finditer(text):
        if m.group(0)[0] in "\"'":
            continue   # a string or character literal
        yield text.count("\n", 0, m.start()) + 1, m.group(0)


def check_comment_paths(root):
    stale = []
    for lib in LIBRARIES:
        for folder, _, names in os.walk(os.path.join(root, lib)):
            for name in sorted(names):
                if not (name.endswith(SOURCES) or name == "CMakeLists.txt"):
                    continue
                path = os.path.join(folder, name)
                here = os.path.relpath(folder, root)
                bases = [""]
                while here not in ("", "."):
                    bases.append(here)
                    here = os.path.dirname(here)
                with open(path, encoding="utf-8", errors="replace") as fh:
                    text = fh.read()
                for line, comment in comments(name, text):
                    for m in PATH.finditer(comment):
                        named, example = m.group(1), m.group(2)
                        if example or named.startswith(("./", "../")):
                            continue   # an example: a location, or a path as a user writes it
                        if any(os.path.exists(os.path.join(root, b, named)) for b in bases):
                            continue
                        if not any(os.path.isdir(os.path.join(root, b, os.path.dirname(named))) for b in bases):
                            continue   # another project's file
                        at = line + comment.count("\n", 0, m.start())
                        stale.append("%s:%d: %s" % (os.path.relpath(path, root), at, named))
    for s in stale:
        print(s + ": no such file")
    if stale:
        print("A comment names a file this tree does not have: name the file that is there now.")
    return 1 if stale else 0


# Flex's scanner and bison's parser are generated to call each other: the
# parser calls the scanner for each token (yylex), and the scanner's rules
# build the parser's token values with the parser's helpers. The grammar
# tools make the pair; no file of this tree can be moved between them.
ALLOWED_CALL_CIRCLES = {frozenset({"lexer.c", "parser.c"}): "the generated flex scanner and bison parser"}

DEFINED = set("TDBRCGSVW")   # global text, data, bss, read-only, common, small, weak


def call_graph(libraries):
    """object file -> {object file defining a symbol it uses: that symbol}.
    An object file is "file.c (libname.a)"; a symbol defined twice belongs
    to the first definer, as the linker takes it from the libraries in order."""
    defined, used = {}, {}
    for lib in libraries:
        listing = subprocess.run(["nm", "-A", lib], capture_output=True, text=True, check=True).stdout
        prefix = lib + ":"
        for line in listing.splitlines():
            if not line.startswith(prefix):
                continue
            member, _, rest = line[len(prefix):].partition(":")
            fields = rest.split()
            if len(fields) < 2:
                continue
            obj = "%s (%s)" % (member[:-2] if member.endswith(".o") else member, os.path.basename(lib))
            kind, symbol = fields[-2], fields[-1]
            if kind == "U":
                used.setdefault(obj, set()).add(symbol)
            elif kind in DEFINED:
                defined.setdefault(symbol, obj)
    edges = {}
    for obj, symbols in used.items():
        for symbol in sorted(symbols):
            there = defined.get(symbol)
            if there and there != obj:
                edges.setdefault(obj, {}).setdefault(there, symbol)
    return edges


def check_calls(libraries):
    edges = call_graph(libraries)
    bad = [g for g in strong_groups(edges)
           if frozenset(obj.split(" (")[0] for obj in g) not in ALLOWED_CALL_CIRCLES]
    for group in bad:
        print("call circle between %d files: %s" % (len(group), ", ".join(sorted(group))))
        circle = shortest_circle(group, edges)
        for a, b in zip(circle, circle[1:]):
            print("  %s -> %s: calls %s" % (a, b, edges[a][b]))
    if bad:
        print("Move what both sides call below both (a file of its own), so that each file calls only files below "
              "it (docs/architecture.md, the call graph).")
    return 1 if bad else 0


def main(argv):
    checks = {"includes": check_includes, "comment-paths": check_comment_paths}
    if len(argv) >= 3 and argv[1] == "calls":
        return check_calls(argv[2:])
    if len(argv) != 3 or argv[1] not in checks:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    return checks[argv[1]](argv[2])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
