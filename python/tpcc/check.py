"""Running tpcc on a rendered plan and reading its diagnostics back."""

import dataclasses
import json
import os
import subprocess
import tempfile

from . import locate
from .render import render

PLAN_NAME = "plan.plan"


class TpccError(RuntimeError):
    """tpcc could not run (a usage error, an unreadable file: exit 2)."""


class PlanCheckFailed(AssertionError):
    """assert_clean found errors (or warnings, when asked); the message is
    tpcc's text report."""

    def __init__(self, report, diagnostics):
        self.diagnostics = diagnostics
        super().__init__(report)


@dataclasses.dataclass(frozen=True)
class Note:
    message: str
    file: str = None
    line: int = None
    column: int = None


@dataclasses.dataclass(frozen=True)
class Diagnostic:
    check: str                  # "relabel", "layout-mismatch", ...
    level: str                  # "error", "warning" or "unsupported" (what tpcc cannot handle yet)
    message: str
    key: str = None             # the plan dict's key the finding is about, if any
    path: str = None            # the module path whose dict holds key ("" for the model itself)
    file: str = None            # "plan.plan" for the rendered plan, else a model file or config.json
    line: int = None
    column: int = None
    help: tuple = ()            # "fix:" lines
    notes: tuple = ()           # Note, at the other locations involved

    @property
    def fix(self):
        return "\n".join(self.help) or None

    def __str__(self):
        where = f" at {self.key!r}" if self.key is not None else ""
        return f"{self.level}{where}: {self.message} [{self.check}]"


def _config_dict(model, hf_config):
    if hf_config is not None:
        path = os.path.join(hf_config, "config.json") if os.path.isdir(hf_config) else hf_config
        with open(path) as f:
            return json.load(f), None
    config = getattr(model, "config", None)
    if config is None:
        raise TypeError("the model has no .config (a transformers model has); pass hf_config=PATH")
    # what save_pretrained writes: only the values that differ from the defaults
    text = config.to_json_string() if hasattr(config, "to_json_string") else json.dumps(config.to_dict())
    return json.loads(text), text


class _Run:
    """A temporary directory holding the rendered plan and config.json."""

    def __init__(self, model, plan, tp, seq, loss_parallel, mesh, hf_config, model_file):
        self.tpcc = locate.binary()
        config, config_text = _config_dict(model, hf_config)
        self.model_file = model_file or locate.model_file(config, self.tpcc)
        self.text, self.entries = render(os.path.abspath(self.model_file), plan, tp, seq, loss_parallel, mesh)
        self.dir = tempfile.TemporaryDirectory(prefix="tpcc-")
        with open(os.path.join(self.dir.name, PLAN_NAME), "w") as f:
            f.write(self.text)
        if config_text is not None:
            hf_config = os.path.join(self.dir.name, "config.json")
            with open(hf_config, "w") as f:
                f.write(config_text)
        self.hf_config = os.path.abspath(hf_config) if hf_config else None

    def run(self, args, extra_defines, position_ids=False):
        cmd = [self.tpcc, *args, "--color=never"]
        if position_ids:   # the caller numbers the positions: transformers does not count them from a shard
            cmd += ["-W", "no-position-ids"]
        if self.hf_config:
            cmd += ["--hf-config", self.hf_config]
        for name, value in (extra_defines or {}).items():
            cmd += ["-D", f"{name}={_define(value)}"]
        cmd.append(PLAN_NAME)
        p = subprocess.run(cmd, cwd=self.dir.name, capture_output=True, text=True)
        if p.returncode not in (0, 1):
            raise TpccError(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stderr}\nthe rendered plan:\n{self.text}")
        return p

    def close(self):
        self.dir.cleanup()


def _define(v):
    if isinstance(v, bool):
        return "True" if v else "False"
    return str(v)


def _diagnostics(doc):
    """The diagnostics of a --diagnostics-format=json document: one plan's,
    or every plan's of a document that lists several."""
    if "diagnostics" in doc:
        return doc["diagnostics"]
    return [d for plan in doc.get("plans", doc.get("files", [])) for d in plan.get("diagnostics", [])]


def _read(run, d):
    key = path = None
    if os.path.basename(d.get("file") or "") == PLAN_NAME and d.get("line") in run.entries:
        path, key = run.entries[d["line"]]
    notes = tuple(Note(n.get("message", ""), n.get("file"), n.get("line"), n.get("column"))
                  for n in d.get("notes", ()))
    return Diagnostic(check=d.get("check"), level=d.get("level"), message=d.get("message"), key=key, path=path,
                      file=d.get("file"), line=d.get("line"), column=d.get("column"),
                      help=tuple(d.get("help", ())), notes=notes)


def check(model, plan, tp=2, seq=None, loss_parallel=False, mesh=None, hf_config=None, extra_defines=None,
          model_file=None, position_ids=False):
    """Check `plan` (parallelize_module's dict of ParallelStyle objects, a
    dict of module path -> such a dict, or a list of (path, dict)) on
    `model` (a transformers model: its config gives the family and the
    sizes). Returns the diagnostics, errors and warnings, as Diagnostic.
    position_ids=True: the caller passes the model its position_ids, so a
    plan that shards the embedding's output over the sequence does not get
    the position-ids warning."""
    run = _Run(model, plan, tp, seq, loss_parallel, mesh, hf_config, model_file)
    try:
        p = run.run(["--check", "--diagnostics-format=json"], extra_defines, position_ids)
        try:
            doc = json.loads(p.stdout)
        except ValueError as e:
            raise TpccError(f"tpcc wrote no JSON document ({e}):\n{p.stdout}\n{p.stderr}") from None
        return [_read(run, d) for d in _diagnostics(doc)]
    finally:
        run.close()


def report(model, plan, tp=2, seq=None, loss_parallel=False, mesh=None, hf_config=None, extra_defines=None,
           model_file=None, position_ids=False):
    """tpcc's text report (clang-style, with the rendered plan's lines)."""
    run = _Run(model, plan, tp, seq, loss_parallel, mesh, hf_config, model_file)
    try:
        return run.run(["--check"], extra_defines, position_ids).stderr
    finally:
        run.close()


def assert_clean(model, plan, tp=2, seq=None, loss_parallel=False, mesh=None, hf_config=None,
                 extra_defines=None, model_file=None, allow_warnings=True, position_ids=False):
    """For pytest: raise PlanCheckFailed with tpcc's text report when the
    plan has errors (or any warning, with allow_warnings=False). What tpcc
    cannot handle yet (level "unsupported") is no error of the plan."""
    args = (model, plan, tp, seq, loss_parallel, mesh, hf_config, extra_defines, model_file, position_ids)
    diags = check(*args)
    bad = [d for d in diags if d.level == "error" or (not allow_warnings and d.level == "warning")]
    if bad:
        raise PlanCheckFailed(report(*args), diags)
    return diags


def render_plan(model, plan, tp=2, seq=None, loss_parallel=False, mesh=None, hf_config=None, model_file=None):
    """The plan file check() gives tpcc, for reading or for the command line."""
    config, _ = _config_dict(model, hf_config)
    path = model_file or locate.model_file(config, locate.binary())
    return render(os.path.abspath(path), plan, tp, seq, loss_parallel, mesh)[0]
