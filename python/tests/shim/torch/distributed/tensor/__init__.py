"""Placements as torch.distributed.tensor names them (placement_types.py)."""


class Placement:
    pass


class Shard(Placement):
    def __init__(self, dim):
        self.dim = dim

    def __eq__(self, other):
        return isinstance(other, Shard) and other.dim == self.dim

    def __repr__(self):
        return f"Shard(dim={self.dim})"


class Replicate(Placement):
    def __eq__(self, other):
        return isinstance(other, Replicate)

    def __repr__(self):
        return "Replicate()"


class Partial(Placement):
    def __init__(self, reduce_op="sum"):
        self.reduce_op = reduce_op

    def __eq__(self, other):
        return isinstance(other, Partial) and other.reduce_op == self.reduce_op

    def __repr__(self):
        return f"Partial({self.reduce_op})"


class DeviceMesh:
    """mesh_dim_names and size(), as tpcc reads a DeviceMesh."""

    def __init__(self, device_type, shape, mesh_dim_names=None):
        self.device_type = device_type
        self.shape = tuple(shape)
        self.ndim = len(self.shape)
        self.mesh_dim_names = tuple(mesh_dim_names) if mesh_dim_names else None

    def size(self, mesh_dim=None):
        if mesh_dim is None:
            n = 1
            for s in self.shape:
                n *= s
            return n
        return self.shape[mesh_dim]
