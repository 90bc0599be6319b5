#!/usr/bin/env python3
"""Docs.ExamplesRun: every example command of README.md, man/tpcc.1,
man/tprun.1, `tpcc --help` and `tprun --help` runs against a build.

  run_examples.py SRC BUILD

What an example is, where:
  README.md      a ```sh block: every line a command (a line ending in '\\'
                 goes on to the next; '#' lines are comments); a block with
                 no language: the lines after a '$ ' prompt, the rest its
                 output; other languages (```python) are not commands
  man/*.1        the .nf ... .fi lines of the EXAMPLE section, '#' lines
                 comments
  --help         the lines under "Examples", each indented by two spaces,
                 up to the next blank line

The commands of each file (and of each --help) run one after another,
each in bash, in a scratch directory of their own that stands for the
repository root (README.md runs its examples from there): every top-level
entry of SRC is linked into it, and build is BUILD. BUILD is first on PATH; TPCC_MODEL_PATH is unset, as for
a new user. The installed data of the man pages' examples
(/usr/share/tpcc/plans, /usr/share/tpcc/models) is the source tree's
plans/ and models/, which cmake --install copies there. An example exits
0, or 1 where its shown output ends in "N errors generated." (a check
that finds what it shows).

NOT_RUN names the few examples that cannot run here, with the reason, and
SHORTENED the rewrites that keep the run in seconds; an entry that no
example matches any more is an error, so neither list outlives its
example.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

NOT_RUN = {
    'tools/setup.sh && tools/main_job.sh': 'installs packages and builds build/; Tools.MainJob runs the main job',
    'tools/test.sh': 'builds and runs this test suite',
    'tprun -n 8 -f hosts -ppn 4 llama.sched': 'needs two nodes of four GPUs (a hostfile)',
    'srun --nodes=2 --ntasks-per-node=4 --gpus-per-task=1 --mpi=pmi2 tprun llama.sched':
        'needs a Slurm cluster with GPUs',
}
SHORTENED = {
    # README's training run: 2 of its 300 steps, its evaluation still after the last
    '--steps 300': '--steps 2',
}
INSTALLED_DATA = '/usr/share/tpcc/'
ERRORS_SHOWN = re.compile(r'^\d+ errors? generated\.$')
TIMEOUT_S = 120


def joined(lines):
    """(command, its index in lines) for lines whose trailing '\\' continues them."""
    out, cmd, start = [], None, 0
    for i, line in enumerate(lines):
        if cmd is None:
            cmd, start = line.strip(), i
        else:
            cmd = cmd[:-1].rstrip() + ' ' + line.strip()
        if not cmd.endswith('\\'):
            out.append((cmd, start))
            cmd = None
    return out


def transcript(block):
    """(command, its index in block, expected exit status) of the '$ ' lines
    of a transcript; the lines up to the next prompt are its shown output."""
    prompts = [k for k, line in enumerate(block) if line.startswith('$ ')] + [len(block)]
    out = []
    for k, nxt in zip(prompts, prompts[1:]):
        cmd = joined([block[k][2:]] + block[k + 1:nxt])[0][0]     # its continuation lines joined
        status = 1 if any(ERRORS_SHOWN.match(line.strip()) for line in block[k + 1:nxt]) else 0
        out.append((cmd, k, status))
    return out


def readme_examples(path):
    """(line number, command, expected exit status) of README.md's blocks."""
    found, lines = [], open(path, encoding='utf-8').read().split('\n')
    fences = [n for n, line in enumerate(lines) if line.startswith('```')]
    for start, end in zip(fences[::2], fences[1::2]):
        lang, block = lines[start][3:].strip(), lines[start + 1:end]
        if lang == 'sh':
            found += [(start + k + 2, cmd, 0) for cmd, k in joined(block) if cmd and not cmd.startswith('#')]
        elif lang == '':
            found += [(start + k + 2, cmd, status) for cmd, k, status in transcript(block)]
    return found


def man_examples(path):
    """(line number, command, 0) of a man page's EXAMPLE section."""
    found, section, nofill = [], '', False
    for n, line in enumerate(open(path, encoding='utf-8'), 1):
        line = line.rstrip('\n')
        if line.startswith('.SH'):
            section = line[3:].strip().strip('"')
        elif section.startswith('EXAMPLE') and line == '.nf':
            nofill = True
        elif line == '.fi':
            nofill = False
        elif nofill and line.strip() and not line.startswith('#'):
            found.append((n, line.replace('\\-', '-').replace('\\(aq', "'"), 0))
    return found


def help_examples(text):
    """(line number, command, 0) of a --help's Examples section."""
    found, inside = [], False
    for n, line in enumerate(text.split('\n'), 1):
        if line.startswith('Examples'):
            inside = True
        elif inside and not line.strip():
            inside = False
        elif inside and line.startswith('  '):
            found.append((n, line.strip(), 0))
    return found


def scratch_root(src, build):
    """A directory standing for the repository root, with build/ the build."""
    root = tempfile.mkdtemp(prefix='tpcc-examples-')
    for name in os.listdir(src):
        if not name.startswith('.') and not name.startswith('build'):
            os.symlink(os.path.join(src, name), os.path.join(root, name))
    os.symlink(build, os.path.join(root, 'build'))
    return root


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    src, build = os.path.abspath(argv[1]), os.path.abspath(argv[2])
    examples = []
    examples += [('README.md', *e) for e in readme_examples(os.path.join(src, 'README.md'))]
    for tool in ('tpcc', 'tprun'):
        examples += [('man/%s.1' % tool, *e) for e in man_examples(os.path.join(src, 'man', tool + '.1'))]
    for tool in ('tpcc', 'tprun'):
        text = subprocess.run([os.path.join(build, tool), '--help'], stdout=subprocess.PIPE,
                              universal_newlines=True, check=True).stdout
        examples += [('%s --help' % tool, *e) for e in help_examples(text)]

    bad = []
    for cmd in NOT_RUN:
        if not any(e[2] == cmd for e in examples):
            bad.append('NOT_RUN names "%s", which no example is' % cmd)
    for old in SHORTENED:
        if not any(old in e[2] for e in examples):
            bad.append('SHORTENED rewrites "%s", which no example has' % old)

    env = {k: v for k, v in os.environ.items() if k != 'TPCC_MODEL_PATH'}
    env['PATH'] = build + os.pathsep + env.get('PATH', '')
    roots, ran = {}, 0
    for where, line, cmd, expected in examples:
        if where not in roots:
            roots[where] = scratch_root(src, build)
        root = roots[where]
        if cmd in NOT_RUN:
            print('%s:%d: not run (%s): %s' % (where, line, NOT_RUN[cmd], cmd))
            continue
        run = cmd.replace(INSTALLED_DATA, src + '/')
        for old, new in SHORTENED.items():
            run = run.replace(old, new)
        try:
            p = subprocess.run(['bash', '-o', 'pipefail', '-c', run], cwd=root, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, universal_newlines=True, timeout=TIMEOUT_S)
            status, output = p.returncode, p.stdout
        except subprocess.TimeoutExpired:
            status, output = 'a timeout (%d s)' % TIMEOUT_S, ''
        ran += 1
        if status != expected:
            bad.append('%s:%d: %s\n  exit %s, expected %d:\n%s' % (where, line, run, status, expected,
                                                                     '\n'.join('    ' + l for l in output.split('\n')[-20:])))
        else:
            print('%s:%d: ok: %s' % (where, line, run))
    for b in bad:
        print(b)
    print('%d examples, %d run, %d not run, %d problems' % (len(examples), ran, len(examples) - ran, len(bad)))
    if bad:
        print('their files: %s' % ' '.join(roots.values()))
    else:
        for root in roots.values():
            shutil.rmtree(root)     # its links are removed, never followed
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
