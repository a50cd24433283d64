"""The compiled tier: tracing, functions of scalars and of arrays, their files, replay,
tiers, generated modules, the threading layer and batch errors."""

from fastad.compiled.function import BlockFunction, CompiledFunction

__all__ = ["BlockFunction", "CompiledFunction"]
