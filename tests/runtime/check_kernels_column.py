#!/usr/bin/env python3
"""sched/ops.def's kernels column is what the executor calls
(tests/CMakeLists.txt, OpTable.KernelsColumnIsWhatTheExecutorCalls).

  check_kernels_column.py SRC

For every row, the tp_backend members its exec_<name> in
runtime/exec/exec.c calls, itself or through the file's static helpers,
must be those its kernels column lists. tprun checks a backend against the
column before it runs a schedule (runtime/exec/kernels_check.c): a kernel
called but not listed would pass that check on a backend without it and
fail mid-step. Prints each row that differs and exits 1; 0 when all agree.
"""
import os
import re
import sys


def without_comments(text):
    return re.sub(r'/\*.*?\*/|//[^\n]*', ' ', text, flags=re.S)


def closing(text, at):
    """The index just past the bracket that closes the one at text[at]."""
    pair = {'(': ')', '{': '}'}[text[at]]
    depth = 0
    for i in range(at, len(text)):
        if text[i] == text[at]:
            depth += 1
        elif text[i] == pair:
            depth -= 1
            if depth == 0:
                return i + 1
    sys.exit('unbalanced %r at offset %d' % (text[at], at))


def top_level_args(inner):
    args, depth, start = [], 0, 0
    for i, c in enumerate(inner):
        if c in '([{':
            depth += 1
        elif c in ')]}':
            depth -= 1
        elif c == ',' and depth == 0:
            args.append(inner[start:i].strip())
            start = i + 1
    return args + [inner[start:].strip()]


def kernels_column(src):
    """name -> the set of members its row's KERNEL(...) entries name."""
    text = without_comments(open(os.path.join(src, 'sched/ops.def'), encoding='utf-8').read())
    rows = {}
    for m in re.finditer(r'^OP\(', text, re.M):
        args = top_level_args(text[m.end():closing(text, m.end() - 1) - 1])
        rows[args[1]] = set(re.findall(r'\bKERNEL\((\w+)\)', args[-1]))
    return rows


def executor_calls(src):
    """exec_<name> -> the backend members it calls, through static helpers too."""
    text = without_comments(open(os.path.join(src, 'runtime/exec/exec.c'), encoding='utf-8').read())
    bodies = {}
    for m in re.finditer(r'^(?:EXEC\((\w+)\)|static\b[^;{}=]*?\b(\w+)\s*\([^;{}]*\))\s*\{', text, re.M):
        name = 'exec_' + m.group(1) if m.group(1) else m.group(2)
        bodies[name] = text[m.end() - 1:closing(text, m.end() - 1)]
    direct = {f: set(re.findall(r'\bbe->(\w+)\s*\(', b)) for f, b in bodies.items()}
    callees = {f: {g for g in re.findall(r'\b(\w+)\s*\(', b) if g in bodies and g != f} for f, b in bodies.items()}

    def reach(f, seen):
        members = set(direct[f])
        for g in callees[f] - seen:
            members |= reach(g, seen | {g})
        return members

    return {f[len('exec_'):]: reach(f, {f}) for f in bodies if f.startswith('exec_')}


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    src = sys.argv[1]
    column, calls = kernels_column(src), executor_calls(src)
    bad = []
    for name, listed in sorted(column.items()):
        if name not in calls:
            bad.append('%s: no EXEC(%s) in runtime/exec/exec.c' % (name, name))
        elif calls[name] != listed:
            bad.append('%s: exec_%s calls %s; its kernels column lists %s' % (
                name, name, ', '.join(sorted(calls[name])) or 'none', ', '.join(sorted(listed)) or 'none'))
    for line in bad:
        print(line)
    if not column:
        print('no rows read from sched/ops.def')
    return 1 if bad or not column else 0


if __name__ == '__main__':
    sys.exit(main())
