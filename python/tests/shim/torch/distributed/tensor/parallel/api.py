"""parallelize_module, recording (module, mesh, plan) instead of sharding."""

calls = []


def parallelize_module(module, device_mesh=None, parallelize_plan=None):
    calls.append((module, device_mesh, parallelize_plan))
    return module
