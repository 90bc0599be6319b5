"""tpcc: check a PyTorch tensor-parallel plan on a live model.

    import tpcc
    for d in tpcc.check(model, plan, tp=2, seq=2048):
        print(d)

`model` is a transformers model (its config gives the family and the
sizes), `plan` parallelize_module's dict of ParallelStyle objects (or a
dict of module path -> dict). The tpcc binary does the checking: it is
found on PATH or through TPCC. Only the standard library is imported.
"""

from .check import (Diagnostic, Note, PlanCheckFailed, TpccError, assert_clean, check, render_plan,
                    report)
from .locate import TpccNotFound
from .styles import UnsupportedStyleError

__version__ = "0.1.0"

__all__ = ["check", "assert_clean", "report", "render_plan", "Diagnostic", "Note", "PlanCheckFailed",
           "TpccError", "TpccNotFound", "UnsupportedStyleError"]
