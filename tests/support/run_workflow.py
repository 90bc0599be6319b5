#!/usr/bin/env python3
"""Run a GitHub Actions workflow's steps as written, for the tests.

usage: run_workflow.py WORKFLOW REPO TPCC VALIDATE_SARIF SCHEMA

Runs each job's steps in order in REPO, as a runner would on a push:
a `run:` step with `bash --noprofile --norc -eo pipefail` (GitHub's shell
for bash); an `if:` with GitHub's expression syntax over always(),
steps.ID.outcome and github.event (a push: no pull_request), a step
without one only while every step before it succeeded. The steps that
need the network are stood in for: actions/checkout (REPO is the
checkout; the one of tpcc/tpcc into PATH gets PATH/build/tpcc, a link to
TPCC, as its build step makes it), the build step (a `run:` of
tools/setup.sh: TPCC is built), and github/codeql-action/upload-sarif
(its sarif_file must exist and be what a code-scanning upload accepts:
VALIDATE_SARIF with SCHEMA). Prints one JSON object: for each step, its
name, outcome (success, failure, skipped), exit status, stdout and
stderr. Needs python3-yaml.
"""
import json
import os
import re
import subprocess
import sys

import yaml


def evaluate(condition, outcomes):
    """A GitHub expression, with what a push event holds."""
    expr = condition.strip()
    if expr.startswith('${{') and expr.endswith('}}'):
        expr = expr[3:-2]
    context = {'github.event_name': 'push'}

    def lookup(match):
        path = match.group(0)
        step = re.fullmatch(r'steps\.([\w-]+)\.outcome', path)
        if step:
            return repr(outcomes.get(step.group(1), ''))
        return repr(context.get(path))   # absent: null, as GitHub has it
    expr = re.sub(r'\balways\(\)', 'True', expr)
    expr = re.sub(r'[A-Za-z_][\w-]*(?:\.[A-Za-z_][\w-]*)+', lookup, expr)
    expr = expr.replace('&&', ' and ').replace('||', ' or ')
    expr = re.sub(r'!(?!=)', ' not ', expr)
    return bool(eval(expr, {'__builtins__': {}}, {'True': True, 'None': None}))


def main():
    if len(sys.argv) != 6:
        print(__doc__, file=sys.stderr)
        return 2
    workflow, repo, tpcc, validate, schema = sys.argv[1:]
    flow = yaml.safe_load(open(workflow))
    report = []
    for job in flow['jobs'].values():
        outcomes, failed = {}, False
        for step in job['steps']:
            name = step.get('name') or step.get('uses') or step.get('run', '').split('\n')[0]
            if 'if' in step:
                runs = evaluate(str(step['if']), outcomes)
            else:
                runs = not failed
            result = {'name': name, 'outcome': 'skipped', 'status': None, 'stdout': '', 'stderr': ''}
            if runs:
                uses, run = step.get('uses', ''), step.get('run')
                if uses.startswith('actions/checkout'):
                    path = step.get('with', {}).get('path')
                    if path:
                        os.makedirs(os.path.join(repo, path, 'build'), exist_ok=True)
                        os.symlink(tpcc, os.path.join(repo, path, 'build', 'tpcc'))
                    status, out, err = 0, '', ''
                elif uses.startswith('github/codeql-action/upload-sarif'):
                    sarif = os.path.join(repo, step['with']['sarif_file'])
                    p = subprocess.run([sys.executable, validate, schema, sarif], capture_output=True, text=True)
                    status, out, err = p.returncode, p.stdout, p.stderr
                elif run is not None and 'tools/setup.sh' in run:
                    status, out, err = 0, '', ''
                elif run is not None:
                    p = subprocess.run(['bash', '--noprofile', '--norc', '-eo', 'pipefail', '-c', run], cwd=repo,
                                       capture_output=True, text=True)
                    status, out, err = p.returncode, p.stdout, p.stderr
                else:
                    status, out, err = 1, '', 'a step this runner does not know: %s' % uses
                result.update(outcome='success' if status == 0 else 'failure', status=status, stdout=out,
                              stderr=err)
                failed = failed or status != 0
            if 'id' in step:
                outcomes[step['id']] = result['outcome']
            report.append(result)
    json.dump(report, sys.stdout, indent=1)
    return 0


if __name__ == '__main__':
    sys.exit(main())
