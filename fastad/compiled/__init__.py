"""The compiled tier: tracing, functions of scalars and of arrays, their files, replay,
tiers, generated modules, the threading layer and batch errors."""

from fastad.compiled.block_function import BlockFunction
from fastad.compiled.compiled_function import CompiledFunction
from fastad.compiled.function import compile, load

__all__ = ["BlockFunction", "CompiledFunction", "compile", "load"]
