"""PyTorch ParallelStyle objects written in the plan language.

Styles and placements are read by duck typing: the class name and the
attributes torch 2.15 stores (ColwiseParallel.input_layouts is a 1-tuple,
SequenceParallel keeps sequence_sharding = (Shard(d),), PrepareModuleInput
keeps input_layouts, desired_input_layouts, input_kwarg_layouts,
desired_input_kwarg_layouts and use_local_output, ...), so this module
imports nothing from torch. A Hugging Face tp_plan string ("colwise") is
written as it is.
"""

# where torch defines its styles; a subclass defined elsewhere may change
# the hooks, so it is refused rather than read as its base class
_TORCH_STYLE_MODULE = "torch.distributed.tensor.parallel"


class UnsupportedStyleError(TypeError):
    """A plan value tpcc cannot express: a custom ParallelStyle subclass,
    an unknown placement, a Partial other than a sum."""

    def __init__(self, key, what):
        self.key = key
        super().__init__(f"plan entry {key!r}: {what}")


def placement(key, p, allow_none=False):
    """Replicate(), Shard(d), Partial() or None, as the plan spells it."""
    if p is None and allow_none:
        return "None"
    name = type(p).__name__
    if name == "Replicate":
        return "Replicate()"
    if name == "Shard" and isinstance(getattr(p, "dim", None), int):
        return f"Shard({p.dim})"
    if name == "Partial":
        op = getattr(p, "reduce_op", "sum")
        if op not in (None, "sum"):
            raise UnsupportedStyleError(key, f"Partial({op!r}) is not supported; tpcc models sums only")
        return "Partial()"
    raise UnsupportedStyleError(key, f"{p!r} ({type(p).__name__}) is not a placement tpcc reads "
                                     "(Replicate(), Shard(d), Partial())")


def _one(key, layouts):
    """ColwiseParallel and RowwiseParallel keep their layout as a 1-tuple."""
    if isinstance(layouts, (tuple, list)):
        if len(layouts) != 1:
            raise UnsupportedStyleError(key, f"expected one layout, got {len(layouts)}")
        layouts = layouts[0]
    return placement(key, layouts)


def _tuple(key, layouts):
    if not isinstance(layouts, (tuple, list)):
        layouts = (layouts,)
    inner = ", ".join(placement(key, p, allow_none=True) for p in layouts)
    return f"({inner},)" if len(layouts) == 1 else f"({inner})"


def _kw_dict(key, layouts):
    inner = ", ".join(f"{_pystr(k)}: {placement(key, v)}" for k, v in layouts.items())
    return "{" + inner + "}"


def _pystr(s):
    return '"' + str(s).replace("\\", "\\\\").replace('"', '\\"') + '"'


def _bool(b):
    return "True" if b else "False"


def _inputs(key, s):
    args = []
    if getattr(s, "input_layouts", None) is not None:
        args.append(f"input_layouts={_tuple(key, s.input_layouts)}")
        args.append(f"desired_input_layouts={_tuple(key, s.desired_input_layouts)}")
    if getattr(s, "input_kwarg_layouts", None):
        args.append(f"input_kwarg_layouts={_kw_dict(key, s.input_kwarg_layouts)}")
        args.append(f"desired_input_kwarg_layouts={_kw_dict(key, s.desired_input_kwarg_layouts)}")
    return args


def _outputs(key, s):
    return [f"output_layouts={_tuple(key, s.output_layouts)}",
            f"desired_output_layouts={_tuple(key, s.desired_output_layouts)}"]


def _colrow(key, s):
    return [f"input_layouts={_one(key, s.input_layouts)}", f"output_layouts={_one(key, s.output_layouts)}",
            f"use_local_output={_bool(s.use_local_output)}"]


def _sequence(key, s):
    (seq,) = s.sequence_sharding
    return [f"sequence_dim={seq.dim}", f"use_local_output={_bool(s.use_local_output)}"]


def _prepare_input(key, s):
    return _inputs(key, s) + [f"use_local_output={_bool(s.use_local_output)}"]


def _prepare_output(key, s):
    return _outputs(key, s) + [f"use_local_output={_bool(s.use_local_output)}"]


def _prepare_input_output(key, s):
    i, o = s.prepare_module_input, s.prepare_module_output
    return (_inputs(key, i) + [f"use_local_input={_bool(i.use_local_output)}"]
            + _outputs(key, o) + [f"use_local_output={_bool(o.use_local_output)}"])


_STYLES = {
    "ColwiseParallel": _colrow,
    "RowwiseParallel": _colrow,
    "SequenceParallel": _sequence,
    "PrepareModuleInput": _prepare_input,
    "PrepareModuleOutput": _prepare_output,
    "PrepareModuleInputOutput": _prepare_input_output,
}


def style(key, s):
    """One plan value as the plan language writes it."""
    if isinstance(s, str):
        return _pystr(s)
    cls = type(s)
    read = _STYLES.get(cls.__name__)
    if read is None or not cls.__module__.startswith(_TORCH_STYLE_MODULE):
        raise UnsupportedStyleError(
            key, f"{cls.__module__}.{cls.__qualname__} is not one of PyTorch's parallel styles "
                 f"({', '.join(_STYLES)}) or a Hugging Face tp_plan string; tpcc cannot tell what its hooks do")
    try:
        args = read(key, s)
    except AttributeError as e:
        raise UnsupportedStyleError(key, f"{cls.__name__} lacks an attribute torch 2.15 sets: {e}") from None
    return f"{cls.__name__}({', '.join(args)})"
