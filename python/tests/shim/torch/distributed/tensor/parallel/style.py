"""The parallel styles' constructors as torch 2.15 writes them: the same
attributes with the same defaults (tuples where torch keeps tuples)."""

from torch.distributed.tensor import Placement, Replicate, Shard


class ParallelStyle:
    src_data_rank = 0


class ColwiseParallel(ParallelStyle):
    def __init__(self, *, input_layouts=None, output_layouts=None, use_local_output=True):
        self.input_layouts = (input_layouts or Replicate(),)
        self.output_layouts = (output_layouts or Shard(-1),)
        self.desired_input_layouts = (Replicate(),)
        self.use_local_output = use_local_output


class RowwiseParallel(ParallelStyle):
    def __init__(self, *, input_layouts=None, output_layouts=None, use_local_output=True):
        self.input_layouts = (input_layouts or Shard(-1),)
        self.output_layouts = (output_layouts or Replicate(),)
        self.use_local_output = use_local_output


class SequenceParallel(ParallelStyle):
    def __init__(self, *, sequence_dim=1, use_local_output=False):
        self.sequence_sharding = (Shard(sequence_dim),)
        self.use_local_output = use_local_output


class PrepareModuleInput(ParallelStyle):
    def __init__(self, *, input_layouts=None, desired_input_layouts=None, input_kwarg_layouts=None,
                 desired_input_kwarg_layouts=None, use_local_output=False):
        self.input_layouts = (input_layouts,) if isinstance(input_layouts, Placement) else input_layouts
        self.desired_input_layouts = ((desired_input_layouts,) if isinstance(desired_input_layouts, Placement)
                                      else desired_input_layouts)
        self.use_local_output = use_local_output
        if self.input_layouts is not None:
            assert self.desired_input_layouts is not None, "desired module inputs should not be None!"
            assert len(self.input_layouts) == len(self.desired_input_layouts), \
                "input_layouts and desired_input_layouts should have same length!"
        self.with_kwargs = input_kwarg_layouts is not None
        self.input_kwarg_layouts = input_kwarg_layouts or {}
        self.desired_input_kwarg_layouts = desired_input_kwarg_layouts or {}


class PrepareModuleOutput(ParallelStyle):
    def __init__(self, *, output_layouts, desired_output_layouts, use_local_output=True):
        self.output_layouts = (output_layouts,) if isinstance(output_layouts, Placement) else output_layouts
        self.desired_output_layouts = ((desired_output_layouts,) if isinstance(desired_output_layouts, Placement)
                                       else desired_output_layouts)
        self.use_local_output = use_local_output
        assert len(self.output_layouts) == len(self.desired_output_layouts), \
            "output_layouts and desired_output_layouts should have same length!"


class PrepareModuleInputOutput(ParallelStyle):
    def __init__(self, *, input_layouts=None, desired_input_layouts=None, input_kwarg_layouts=None,
                 desired_input_kwarg_layouts=None, use_local_input=False, output_layouts,
                 desired_output_layouts, use_local_output=True):
        self.prepare_module_input = PrepareModuleInput(
            input_layouts=input_layouts, desired_input_layouts=desired_input_layouts,
            input_kwarg_layouts=input_kwarg_layouts, desired_input_kwarg_layouts=desired_input_kwarg_layouts,
            use_local_output=use_local_input)
        self.prepare_module_output = PrepareModuleOutput(
            output_layouts=output_layouts, desired_output_layouts=desired_output_layouts,
            use_local_output=use_local_output)
