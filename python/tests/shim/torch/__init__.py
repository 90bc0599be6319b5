"""A stand-in for torch, enough for tpcc's tests where torch is not
installed: the placements and parallel styles with the attributes torch
2.15 sets (torch/distributed/tensor/parallel/style.py), a Module tree with
named_modules(), and a parallelize_module that records its calls."""

from . import distributed, nn  # noqa: F401
