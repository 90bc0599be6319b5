#!/usr/bin/env python3
"""Docs.ExamplesRun: every example command of README.md, docs/*.md,
man/tpcc.1, man/tprun.1, `tpcc --help` and `tprun --help` runs against a
build.

  run_examples.py SRC BUILD

What an example is, where:
  README.md,     a ```sh block: every line a command (a line ending in '\\'
  docs/*.md      goes on to the next; '#' lines are comments); a block with
                 no language: the lines after a '$ ' prompt, the rest its
                 output; other languages (```python) are not commands, nor
                 is a block with no language and no prompt (a synopsis, a
                 tree, output alone)
  man/*.1        the .nf ... .fi lines of the EXAMPLE section, '#' lines
                 comments
  --help         the lines under "Examples", each indented by two spaces,
                 up to the next blank line

The commands of each file (and of each --help) run one after another,
each in bash, in a scratch directory of their own that stands for the
repository root (README.md and docs/*.md run their examples from there),
so that a later command may use an earlier one's output: every top-level
entry of SRC is linked into it, and build is BUILD. BUILD is first on PATH; TPCC_MODEL_PATH is unset, as for
a new user. The installed data of the man pages' examples
(/usr/share/tpcc/plans, /usr/share/tpcc/models) is the source tree's
plans/ and models/, which cmake --install copies there. An example exits
0; where its shown output ends in "N errors generated.", 1 (a check that
finds what it shows), or 2 when an error shown is an [io] one (a file
tpcc cannot or may not read: its exit status then).

STAND_INS makes the placeholders for a user's own files (CKPT,
tokens.bin, ...) in the scratch root, before the first command that
names one: small files of the same kind, made from the shipped data. One
named by an absolute path (/tmp/pr/x.plan) is made under the scratch
root, and the command runs with that path instead.

NOT_RUN names the examples that cannot run here (a GPU, a cluster, an
installation or a build of minutes), with the reason, and SHORTENED the
rewrites that keep the run in seconds (fewer steps, smaller shapes); an
entry of either, or of STAND_INS, that no example matches any more is an
error, so none of them outlives its example. A NOT_RUN entry is the
command without its trailing '# comment'.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

HOSTFILE = 'needs two nodes of four GPUs (a hostfile)'
SLURM = 'needs a Slurm cluster with GPUs'
GPU = 'needs a GPU (--backend cuda)'
FUZZ = 'needs a clang libFuzzer build (build-fuzz) and runs for minutes; Fuzz.Replay.* replays the corpus'
BUILDS = 'builds tpcc (minutes)'
NOT_RUN = {
    # README.md
    'tools/setup.sh && tools/main_job.sh': 'installs packages and builds build/; Tools.MainJob runs the main job',
    'tools/test.sh': 'builds and runs this test suite',
    # man/tprun.1
    'tprun -n 8 -f hosts -ppn 4 llama.sched': HOSTFILE,
    'srun --nodes=2 --ntasks-per-node=4 --gpus-per-task=1 --mpi=pmi2 tprun llama.sched': SLURM,
    # docs/cluster.md
    'tprun -n 8 -f hosts -ppn 4 llama.sched --data tokens.bin --steps 1000': HOSTFILE,
    'srun --nodes=2 --ntasks-per-node=4 --gpus-per-task=1 --mpi=pmi2 tprun llama.sched --data tokens.bin --steps 1000':
        SLURM,
    'tprun -n 8 -f hosts -ppn 4 llama-dp2-tp4.sched --data tokens.bin --steps 1000': HOSTFILE,
    'mpiexec -n 8 -f hosts -ppn 4 tprun llama-dp2-tp4.sched --data tokens.bin --steps 1000': HOSTFILE,
    'srun --nodes=2 --ntasks-per-node=4 --gpus-per-task=1 --mpi=pmi2 tprun llama-dp2-tp4.sched --data tokens.bin '
    '--steps 1000': SLURM,
    'srun --mpi=pmi2 tprun llama-dp2-tp4.sched --weights ckpt/ --data tokens.bin --steps 1000 --save out/': SLURM,
    # docs/development.md: a long fuzzing run, and folding what it found into the corpus
    'CC=clang CXX=clang++ cmake -S . -B build-fuzz -DTPCC_FUZZ=ON -DTPCC_TESTS=OFF -DTPCC_CUDA=OFF': FUZZ,
    'cmake --build build-fuzz -j2 --target fuzz_plan fuzz_schedule fuzz_run fuzz_safetensors fuzz_npy fuzz_train':
        FUZZ,
    'tests/fuzz/seeds.sh build/tpcc build-fuzz/seeds': FUZZ,
    'for t in plan schedule run safetensors npy train; do tests/fuzz/run.sh build-fuzz $t 600; done': FUZZ,
    'mkdir merged small && find build-fuzz/corpus/run -size -9100c -exec cp {} small/ \\;': FUZZ,
    'build-fuzz/tests/fuzz/fuzz_run -merge=1 merged tests/fuzz/corpus/run small': FUZZ,
    'rm -r small tests/fuzz/corpus/run && mv merged tests/fuzz/corpus/run':
        FUZZ + ", and replaces the source tree's corpus",
    # docs/gpu.md, docs/schedule.md, docs/training.md
    'tprun -n 8 --backend cuda llama.sched --weights /path/to/checkpoint --labels tokens': GPU + ', eight of them',
    'tprun -n 2 llama-tp2.sched --labels tokens': 'needs a GPU: what two ranks sharing one print',
    'tprun big-heads.sched --backend cuda --labels tokens': GPU + ': its refusal of the schedule',
    'tprun x.sched --backend cuda --weights CKPT --data tokens.npy --steps 5': GPU,
    # docs/install.md
    'cmake -S . -B build -DTPCC_TESTS=OFF': BUILDS,
    'cmake --build build -j2': BUILDS,
    'cmake --install build --prefix ~/.local': 'installs tpcc for the user; Install.PrefixAndRun installs it '
                                                'into a scratch prefix and runs it there',
    # docs/python.md
    'pip install ./python': "installs into the user's Python; Python.Bridge runs the package with PYTHONPATH=python",
    # docs/training.md
    'python3 tools/prepare_data.py data/genesis/genesis.txt --tokenizer data/genesis/tokenizer.json '
    '--config data/genesis/config.json -o data/genesis/genesis':
        'writes over the shipped streams in data/genesis (and needs tokenizers from PyPI); Python.PrepareData '
        'runs its layouts',
}
# the shapes of plans/llama-tiny.plan in one layer, with the shipped
# stream's vocabulary (data/genesis: 512 ids)
SMALL = '-D vocab=512 -D hidden=64 -D layers=1 -D heads=4 -D kv_heads=2 -D ffn=128 -D seq=16'
SHORTENED = {
    # README's and training.md's training run: 2 of its 300 steps, its evaluation still after the last
    '--steps 300': '--steps 2',
    # training.md's runs of 100 steps, and the 200 that the resumed one goes on to
    '--steps 100': '--steps 2',
    '--steps 200': '--steps 4',
    # training.md: torchtitan's Llama 3 8B at tp 8 in one small layer at tp 2 (its
    # "Gradient accumulation" runs step.sched on 2 ranks)
    'plans/llama-torchtitan.plan --train': 'plans/llama-torchtitan.plan %s -D tp=2 --train' % SMALL,
    # training.md: rows of 2048 tokens (the model's default seq), of 128 or 16 here
    '--segments -o step.sched': '--segments -D seq=128 -o step.sched',
    '-D batch=8 -o train.sched': '-D batch=8 -D seq=16 -o train.sched',
    '-D batch=4 -o llama-2d.sched': '-D batch=4 -D seq=16 -o llama-2d.sched',
}
INSTALLED_DATA = '/usr/share/tpcc/'
ERRORS_SHOWN = re.compile(r'^\d+ errors? generated\.$')
IO_ERROR_SHOWN = re.compile(r': error: .*\[io\]$')
TIMEOUT_S = 120


def checkpoint(path, src):
    """A Hugging Face checkpoint (config.json, model.safetensors) of
    docs/training.md's init/: data/genesis's shapes."""
    subprocess.run([sys.executable, os.path.join(src, 'tools', 'make_checkpoint.py'), '--family', 'llama',
                    '--out', path, '--config', 'hidden=128', 'heads=4', 'kv_heads=4', 'layers=4', 'ffn=352',
                    'vocab=512'], stdout=subprocess.DEVNULL, check=True)


GENESIS_TRAIN = os.path.join('data', 'genesis', 'genesis.train.npy')


def token_npy(path, src):
    """A token stream: the shipped one (31,801 ids of 512); as labels the same
    ids, Hugging Face's labels, which the model shifts."""
    shutil.copyfile(os.path.join(src, GENESIS_TRAIN), path)


def token_bin(path, src):
    """The shipped stream as llm.c's .bin: 256 int32 (magic 20240520, version
    1, the count), then the ids as uint16."""
    import numpy as np     # here only: the other examples need none
    ids = np.load(os.path.join(src, GENESIS_TRAIN))
    header = np.zeros(256, '<i4')
    header[:3] = 20240520, 1, len(ids)
    with open(path, 'wb') as f:
        f.write(header.tobytes() + ids.astype('<u2').tobytes())


def dp_tp_plan(path, src):
    """A plan on a dp x tp mesh: tests/good/train-data-split.plan, its model
    the shipped Llama by name (found in tpcc's models)."""
    text = open(os.path.join(src, 'tests', 'good', 'train-data-split.plan'), encoding='utf-8').read()
    open(path, 'w', encoding='utf-8').write(re.sub(r'(?m)^model ".*"$', 'model "llama.model"', text))


def plan_of_model(model):
    """A plan whose model line, line 4 as in the docs' output, names model."""
    def make(path, src):
        open(path, 'w', encoding='utf-8').write('# a plan of the docs\' example\n\n\nmodel "%s"\n\nconfig {\n'
                                                '    tp = 2\n}\n\nmesh(tp = tp)\n' % model)
    return make


# The placeholders of docs/*.md for the user's own files, and how each is made
STAND_INS = {
    'CKPT': checkpoint,
    'DIR': checkpoint,
    'tokens.npy': token_npy,
    'labels.npy': token_npy,
    'tokens.bin': token_bin,
    'plan.plan': dp_tp_plan,
    '/tmp/x/plans/mine.plan': plan_of_model('mine.model'),     # a model that is nowhere
    '/tmp/pr/x.plan': plan_of_model('/etc/shadow'),            # a model it may not read
}


def word(name):
    """name as a whole word of a command: not part of a longer name or path
    ('--steps 100' is not in '--steps 1000'); a path may go on below it."""
    return re.compile(r'(?<![\w./-])' + re.escape(name) + r'(?![\w.-])')


def without_comment(cmd):
    """cmd without a trailing shell comment."""
    return re.sub(r'\s+#[^\'"]*$', '', cmd)


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
        shown, status = block[k + 1:nxt], 0
        if any(ERRORS_SHOWN.match(line.strip()) for line in shown):
            # tpcc's exit status: 2 for a file it cannot or may not read, before 1 for errors
            status = 2 if any(IO_ERROR_SHOWN.search(line) for line in shown) else 1
        out.append((cmd, k, status))
    return out


def markdown_examples(path):
    """(line number, command, expected exit status) of a Markdown file's blocks."""
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
    examples += [('README.md', *e) for e in markdown_examples(os.path.join(src, 'README.md'))]
    for name in sorted(os.listdir(os.path.join(src, 'docs'))):
        if name.endswith('.md'):
            examples += [('docs/' + name, *e) for e in markdown_examples(os.path.join(src, 'docs', name))]
    for tool in ('tpcc', 'tprun'):
        examples += [('man/%s.1' % tool, *e) for e in man_examples(os.path.join(src, 'man', tool + '.1'))]
    for tool in ('tpcc', 'tprun'):
        text = subprocess.run([os.path.join(build, tool), '--help'], stdout=subprocess.PIPE,
                              universal_newlines=True, check=True).stdout
        examples += [('%s --help' % tool, *e) for e in help_examples(text)]

    bad = []
    for cmd in NOT_RUN:
        if not any(without_comment(e[2]) == cmd for e in examples):
            bad.append('NOT_RUN names "%s", which no example is' % cmd)
    for old in SHORTENED:
        if not any(word(old).search(e[2]) for e in examples):
            bad.append('SHORTENED rewrites "%s", which no example has' % old)
    for name in STAND_INS:
        if not any(word(name).search(e[2]) for e in examples if without_comment(e[2]) not in NOT_RUN):
            bad.append('STAND_INS makes "%s", which no example that runs names' % name)

    env = {k: v for k, v in os.environ.items() if k != 'TPCC_MODEL_PATH'}
    env['PATH'] = build + os.pathsep + env.get('PATH', '')
    roots, ran = {}, 0
    for where, line, cmd, expected in examples:
        if where not in roots:
            roots[where] = scratch_root(src, build)
        root = roots[where]
        if without_comment(cmd) in NOT_RUN:
            print('%s:%d: not run (%s): %s' % (where, line, NOT_RUN[without_comment(cmd)], cmd))
            continue
        run = cmd.replace(INSTALLED_DATA, src + '/')
        for old, new in SHORTENED.items():
            run = word(old).sub(lambda m: new, run)
        for name, make in STAND_INS.items():
            if not word(name).search(run):
                continue
            path = os.path.join(root, name.lstrip('/'))
            if name.startswith('/'):        # under the scratch root, not in the machine's /tmp
                run = word(name).sub(lambda m: path, run)
            if not os.path.lexists(path):   # an earlier example's file of that name stays
                os.makedirs(os.path.dirname(path), exist_ok=True)
                make(path, src)
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
