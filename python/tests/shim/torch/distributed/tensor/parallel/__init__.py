from .api import calls, parallelize_module  # noqa: F401
from .style import (ColwiseParallel, ParallelStyle, PrepareModuleInput, PrepareModuleInputOutput,  # noqa: F401
                    PrepareModuleOutput, RowwiseParallel, SequenceParallel)
