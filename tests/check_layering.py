#!/usr/bin/env python3
"""check_layering.py: what the source tree's own structure promises.

  check_layering.py includes ROOT
      The folders of compiler/, runtime/, sched/ and util/ include each
      other without a circle: for every two folders, at most one includes
      the other, directly or through others, so each folder reads as a
      layer above those it includes. An include is resolved as the
      compiler resolves it: from the including file's folder, then from the
      repository root (#include "sched/load.h"), then by its name where the
      tree holds one file of that name (the CUDA kernels' own includes).
      A circle is printed with one include that makes each of its steps.

Exit status 0 when the tree keeps the promise, 1 with what breaks it.
"""
import os
import re
import sys

LIBRARIES = ("compiler", "runtime", "sched", "util")
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


def circles(edges):
    """One circle through each strongly connected set of folders (Tarjan)."""
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

    result = []
    for group in found:
        start = min(group)
        # the shortest way back to start inside the group (breadth first)
        back = {start: None}
        queue = [start]
        path = None
        while queue and path is None:
            v = queue.pop(0)
            for w in sorted(edges.get(v, {})):
                if w not in group:
                    continue
                if w == start:
                    path = [v]
                    while back[path[-1]] is not None:
                        path.append(back[path[-1]])
                    path.reverse()
                    break
                if w not in back:
                    back[w] = v
                    queue.append(w)
        result.append(path + [start])
    return result


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


def main(argv):
    if len(argv) != 3 or argv[1] not in ("includes",):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    return check_includes(argv[2])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
