from . import tensor  # noqa: F401
