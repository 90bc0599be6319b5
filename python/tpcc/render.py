"""A parallelize_module plan, with its mesh and configuration, as a plan file."""

from .styles import style, _pystr

# a DeviceMesh's dimension tpcc's styles act on, when it has several
TP_DIM = "tp"


def blocks(plan):
    """The plan as [(path, {key: style})]: parallelize_module's dict on the
    model itself, a dict of module path -> dict (parallelize_module on each
    path, as torchtitan calls it per block), or a list of (path, dict)
    pairs (what --export=pytorch writes as PLAN)."""
    if isinstance(plan, (list, tuple)):
        return [(path, dict(d)) for path, d in plan]
    if not isinstance(plan, dict):
        raise TypeError(f"a plan is a dict of styles, a dict of path -> dict, or a list of (path, dict); "
                        f"got {type(plan).__name__}")
    if plan and all(isinstance(v, dict) for v in plan.values()):
        return list(plan.items())
    return [("", plan)]


def _mesh(mesh, tp):
    """[(name, size)] and the name of the tp dimension."""
    if mesh is None:
        return [(TP_DIM, tp)], TP_DIM
    names = tuple(getattr(mesh, "mesh_dim_names", None) or ())
    ndim = getattr(mesh, "ndim", len(names) or 1)
    if ndim == 1:
        return [(names[0] if names else TP_DIM, mesh.size())], names[0] if names else TP_DIM
    if len(names) != ndim or TP_DIM not in names:
        raise ValueError(f"a {ndim}-D mesh needs mesh_dim_names with a {TP_DIM!r} dimension; got {names}")
    return [(n, mesh.size(i)) for i, n in enumerate(names)], TP_DIM


def render(model_path, plan, tp=2, seq=None, loss_parallel=False, mesh=None):
    """(text, entries): the plan file, and for each line holding a plan
    entry the (path, key) it came from ((path, None) for a block's first
    line)."""
    dims, tp_name = _mesh(mesh, tp)
    lines = ["# rendered by tpcc.render_plan from a parallelize_module plan",
             f"model {_pystr(model_path)}", "", "config {"]
    lines.append(f"    tp = {dict(dims)[tp_name]}")
    if seq is not None:
        lines.append(f"    seq = {int(seq)}")
    lines += ["}", "", "mesh(" + ", ".join(f"{n} = {'tp' if n == tp_name else s}" for n, s in dims) + ")"]
    on = f" on {_pystr(tp_name)}" if len(dims) > 1 else ""
    entries = {}
    for path, d in blocks(plan):
        lines += ["", f"parallelize {_pystr(path)}{on} {{"]
        entries[len(lines)] = (path, None)      # findings about the whole block
        for key, s in d.items():
            lines.append(f"    {_pystr(key)}: {style(key, s)},")
            entries[len(lines)] = (path, key)
        lines.append("}")
    if loss_parallel:
        lines += ["", "loss_parallel()"]
    return "\n".join(lines) + "\n", entries
