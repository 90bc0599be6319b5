#!/usr/bin/env python3
"""The documentation's own tests (tests/CMakeLists.txt, Docs.*).

  check_docs.py links SRC            every relative link and anchor in README.md
                                     and docs/*.md resolves
  check_docs.py readme SRC           README.md is a front door: at most 200 lines
  check_docs.py flags SRC TPCC TPRUN the options of `tpcc --help` and `tprun --help`
                                     are those the tools accept (their getopt
                                     tables) and those of man/tpcc.1, man/tprun.1
                                     and docs/cli.md's option lists
  check_docs.py recipes SRC          the recipes of docs/architecture.md ("Adding
                                     a model family", "... a parallel style", "...
                                     an op") have the steps RECIPES counts, every
                                     step names a file, every file they name
                                     exists, and each names every place the code
                                     needs (the style's, the op's)

Each prints what is wrong and exits 1; 0 when all is well.
"""
import os
import re
import subprocess
import sys

README_MAX_LINES = 200


def slug(text):
    """GitHub's anchor for a heading: markup dropped, lower case, every
    character but letters, digits, '-', '_' and spaces removed, spaces to '-'."""
    t = re.sub(r'<[^>]+>', '', text)
    t = re.sub(r'\[([^\]]*)\]\([^)]*\)', r'\1', t)
    return ''.join('-' if c == ' ' else c for c in t.strip().lower() if c in '-_ ' or c.isalnum())


def outside_fences(lines):
    """(line number, line) of the lines outside ``` fences."""
    fence = False
    for n, line in enumerate(lines, 1):
        if line.lstrip().startswith('```'):
            fence = not fence
            continue
        if not fence:
            yield n, line


def anchors(path):
    """Every anchor of a Markdown file: its headings' (a repeated one gets
    -1, -2, ... as GitHub numbers them) and its <a id> / <a name> tags."""
    seen, found = {}, set()
    for _, line in outside_fences(open(path, encoding='utf-8').read().split('\n')):
        m = re.match(r'^#{1,6}\s+(.*?)\s*#*\s*$', line)
        if m:
            s = slug(m.group(1))
            k = seen.get(s, 0)
            seen[s] = k + 1
            found.add(s if k == 0 else '%s-%d' % (s, k))
        found.update(re.findall(r'<a (?:id|name)="([^"]+)"', line))
    return found


def check_links(src):
    pages = [os.path.join(src, 'README.md')]
    docs = os.path.join(src, 'docs')
    pages += sorted(os.path.join(docs, f) for f in os.listdir(docs) if f.endswith('.md'))
    cache, bad, count = {}, [], 0
    for page in pages:
        lines = open(page, encoding='utf-8').read().split('\n')
        for n, line in outside_fences(lines):
            line = re.sub(r'`[^`]*`', '', line)          # code spans hold no links
            for target in re.findall(r'\]\(([^)\s]+)(?:\s+"[^"]*")?\)', line):
                if re.match(r'^[a-z][a-z0-9+.-]*:', target):   # https:, mailto:
                    continue
                count += 1
                path, _, anchor = target.partition('#')
                dest = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
                where = '%s:%d: %s' % (os.path.relpath(page, src), n, target)
                if not os.path.exists(dest):
                    bad.append(where + ': no such file')
                    continue
                if not os.path.realpath(dest).startswith(os.path.realpath(src) + os.sep):
                    bad.append(where + ': outside the repository')
                    continue
                if anchor:
                    if not dest.endswith('.md'):
                        bad.append(where + ': an anchor into a file that is not Markdown')
                        continue
                    if dest not in cache:
                        cache[dest] = anchors(dest)
                    if anchor not in cache[dest]:
                        bad.append(where + ': no anchor #%s in %s' % (anchor, os.path.relpath(dest, src)))
    for b in bad:
        print(b)
    print('%d relative links in %d pages, %d broken' % (count, len(pages), len(bad)))
    return not bad


def check_readme(src):
    n = len(open(os.path.join(src, 'README.md'), encoding='utf-8').read().rstrip('\n').split('\n'))
    print('README.md: %d lines (at most %d)' % (n, README_MAX_LINES))
    others = [f for f in os.listdir(src) if f.endswith('.md') and f != 'README.md']
    for f in others:
        print('%s: a page outside docs/' % f)
    return n <= README_MAX_LINES and not others


# An option as the help, the man pages and docs/cli.md spell it: a long
# option (--name, its =VALUE dropped) or a one-letter one (-o, -D, -O0).
OPTION = re.compile(r'(?<![\w-])(--[a-z][a-z0-9-]*[a-z0-9]|-[A-Za-z](?![A-Za-z])[0-9]?)')


# MPICH's spelling of a long option with one dash (tprun's -ppn, -hostfile).
HYDRA_OPTION = re.compile(r'(?<![\w-])-[a-z]{2,}\b')


def options_of_text(text, tool, pattern=OPTION):
    """The options a help text (or a Markdown code block like it) lists: the
    first column of its option lines and of its usage lines."""
    found = set()
    for line in text.split('\n'):
        s = line.strip()
        if s.startswith('usage: '):
            s = s[len('usage: '):]
        if not (s.startswith('-') or s.startswith(tool + ' ') or s.startswith('mpiexec ')):
            continue
        first = re.split(r'\s{2,}', s)[0]
        found.update(pattern.findall(first))
    return found


def options_of_man(path):
    """The options of a man page: its SYNOPSIS lines and the tags of its
    .TP paragraphs."""
    found, section, tag_next = set(), '', False
    for line in open(path, encoding='utf-8'):
        line = line.rstrip('\n')
        if line.startswith('.SH'):
            section, tag_next = line[3:].strip().strip('"'), False
            continue
        if line.startswith('.TP'):
            tag_next = True
            continue
        if section == 'SYNOPSIS' or (tag_next and section != 'SYNOPSIS'):
            text = re.sub(r'\\f[BIRP]', '', line).replace('\\-', '-')
            text = re.sub(r'^\.(B|I|BI|BR|IR|RB)\s', '', text)
            found.update(OPTION.findall(text.replace('"', ' ')))
            tag_next = False
    return found


def options_of_cli(path, tool):
    """The options docs/cli.md lists for `tool`: the code blocks whose first
    line starts with the tool's name (or `usage: tool`)."""
    found, block = set(), None
    for line in open(path, encoding='utf-8'):
        if line.startswith('```'):
            if block is not None:
                if block and re.match(r'^(usage: )?%s ' % tool, block[0]):
                    found |= options_of_text(''.join(block), tool)
                block = None
            else:
                block = []
            continue
        if block is not None:
            block.append(line)
    return found


# Where each tool parses its options: getopt_long's optstring and its
# `static const struct option longs[]` table.
OPTION_TABLES = {'tpcc': 'compiler/driver/main.c', 'tprun': 'runtime/tprun.c'}
# tpcc's -O takes 0 or 1, which its help spells with it; tprun hands
# MPICH's one-dash spellings to getopt with two (hydra_spellings).
HELP_SPELLING = {'-O0': '-O', '-O1': '-O'}


def options_accepted(path):
    """The options a tool's getopt_long call accepts: --name for each row
    of its longs[] table, -x for each letter of its optstring."""
    text = open(path, encoding='utf-8').read()
    table = re.search(r'static const struct option longs\[\] = \{(.*?)\n\s*\};', text, re.S)
    optstring = re.search(r'getopt_long\(argc, argv, "([^"]*)"', text)
    if not table or not optstring:
        return None
    return ({'--' + name for name in re.findall(r'\{"([a-z0-9-]+)",', table.group(1))} |
            {'-' + c for c in optstring.group(1) if c.isalpha()})


def check_flags(src, tpcc, tprun):
    ok = True
    for tool, exe in (('tpcc', tpcc), ('tprun', tprun)):
        out = subprocess.run([exe, '--help'], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             universal_newlines=True).stdout
        helped = options_of_text(out, tool)
        if len(helped) < 10:
            print('%s --help: only %d options found' % (tool, len(helped)))
            ok = False
        accepted = options_accepted(os.path.join(src, OPTION_TABLES[tool]))
        if accepted is None:
            print('%s: no getopt_long optstring or longs[] table found' % OPTION_TABLES[tool])
            ok = False
        else:
            hydra = {'-' + o for o in options_of_text(out, tool, HYDRA_OPTION)}
            spelled = {HELP_SPELLING.get(o, o) for o in helped | hydra}
            for o in sorted(accepted - spelled):
                print('%s: %s accepts %s, which %s --help does not list' % (OPTION_TABLES[tool], tool, o, tool))
                ok = False
            for o in sorted(spelled - accepted):
                print('%s --help lists %s, which %s does not accept' % (tool, o, OPTION_TABLES[tool]))
                ok = False
        for name, listed in (('man/%s.1' % tool, options_of_man(os.path.join(src, 'man', tool + '.1'))),
                             ('docs/cli.md', options_of_cli(os.path.join(src, 'docs', 'cli.md'), tool))):
            for o in sorted(helped - listed):
                print('%s: %s --help lists %s, %s does not' % (name, tool, o, name))
                ok = False
            for o in sorted(listed - helped):
                print('%s: lists %s, which %s --help does not' % (name, o, tool))
                ok = False
        print('%s: %d options: %s' % (tool, len(helped), ' '.join(sorted(helped))))
    return ok


# The recipes of docs/architecture.md and how many numbered steps each
# has: a step added to what the code needs is a step added here.
RECIPES = {
    'Adding a model family': 5,
    'Adding a parallel style': 7,
    'Adding an op': 7,      # the row, the forward rule, the gradient, the kernels, the executor, the tests, the format
}
# A file or folder a recipe names, in backticks: `sched/ops.def`.
NAMED_PATH = re.compile(r'`([\w.-]+/[\w./-]*)`')

# Where the code names one style (TP_STYLE_COLWISE, not the table's
# TP_STYLE_NCLASSES, the hook-less TP_STYLE_IDENTITY or a column's
# TP_STYLE_PARAMS_* and TP_STYLE_TAKES_* values); styles.h and
# styles.c are generated from the table itself.
ONE_STYLE = re.compile(r'\bTP_STYLE_(?!NCLASSES\b|IDENTITY\b|PARAMS_|TAKES_)[A-Z_]+\b')
STYLE_TABLE_FILES = ('compiler/plan/styles.h', 'compiler/plan/styles.c')

# The files a new op and its gradient take besides those the code finds
# itself (every backend's table, below): the row and the fields it fills,
# the rules that record it and differentiate it, its kernels, its
# executor, its tests and its documentation.
ADD_OP_FILES = [
    'sched/ops.def', 'sched/load.h', 'sched/program.h', 'sched/load.c',
    'compiler/sema/op_table.c', 'compiler/sema/op_rules.c', 'compiler/passes/autodiff.c',
    'runtime/backends/backend.h', 'runtime/backends/cpu/backward.c', 'runtime/kernels/kernels.h',
    'runtime/exec/exec.c',
    'tests/sched/test_ops_table.cc', 'tests/runtime/test_backend_cpu.cc', 'tests/runtime/test_backend_cpu_grad.cc',
    'tests/runtime/cuda_emu/test_kernels.cc', 'tests/runtime/cuda_emu/test_kernels_grad.cc', 'tools/reference.py',
    'docs/schedule.md', 'sched/format.h',
]


def sources_matching(src, top, pattern):
    """The .c and .h files under top/ whose text matches pattern."""
    found = []
    for folder, _, names in os.walk(os.path.join(src, top)):
        for name in sorted(names):
            path = os.path.join(folder, name)
            if name.endswith(('.c', '.h')) and pattern.search(open(path, encoding='utf-8').read()):
                found.append(os.path.relpath(path, src))
    return sorted(found)


def style_places(src):
    """Every compiler file that names one style's kind."""
    return [f for f in sources_matching(src, 'compiler', ONE_STYLE) if f not in STYLE_TABLE_FILES]


def op_places(src):
    """ADD_OP_FILES and the files under runtime/ that define a backend's
    table (`static const tp_backend name =`): each needs the new kernels."""
    return ADD_OP_FILES + sources_matching(src, 'runtime', re.compile(r'^static const tp_backend \w+ =', re.M))


PLACES = {'Adding a parallel style': style_places, 'Adding an op': op_places}


def sections(path):
    """heading -> the text under it, for the ## headings of a page."""
    out, head = {}, None
    for line in open(path, encoding='utf-8'):
        if line.startswith('## '):
            head = line[3:].strip()
            out[head] = ''
        elif head:
            out[head] += line
    return out


def check_recipes(src):
    ok = True
    page = sections(os.path.join(src, 'docs', 'architecture.md'))
    for title, count in RECIPES.items():
        text = page.get(title)
        if text is None:
            print('docs/architecture.md: no section "%s"' % title)
            ok = False
            continue
        steps = re.split(r'^(?=\d+\. )', text, flags=re.M)[1:]
        numbers = [step.split('.')[0] for step in steps]
        if numbers != [str(n) for n in range(1, count + 1)]:
            print('"%s": steps %s; RECIPES counts %d' % (title, ' '.join(numbers) or 'none', count))
            ok = False
        named = set()
        for n, step in enumerate(steps, 1):
            paths = set(NAMED_PATH.findall(step))
            if not paths:
                print('"%s": step %d names no file' % (title, n))
                ok = False
            named |= paths
        for path in sorted(named):
            if re.search(r'\b[A-Z]{3,}\b', path):
                continue    # a placeholder: models/NAME.model
            if not os.path.exists(os.path.join(src, path)):
                print('"%s" names %s, which does not exist' % (title, path))
                ok = False
        for path in PLACES.get(title, lambda _: [])(src):
            if path not in named:
                print('"%s" does not name %s, which the code needs' % (title, path))
                ok = False
        print('"%s": %d steps, %d files named' % (title, len(steps), len(named)))
    return ok


def main(argv):
    if len(argv) >= 3 and argv[1] == 'links':
        return 0 if check_links(argv[2]) else 1
    if len(argv) >= 3 and argv[1] == 'readme':
        return 0 if check_readme(argv[2]) else 1
    if len(argv) >= 3 and argv[1] == 'recipes':
        return 0 if check_recipes(argv[2]) else 1
    if len(argv) == 5 and argv[1] == 'flags':
        return 0 if check_flags(argv[2], argv[3], argv[4]) else 1
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == '__main__':
    sys.exit(main(sys.argv))
