"""The eager front end: operators, the Var and Block handles, Tape, functions, blocks,
the NumPy protocol, optimisation and files of tapes with blocks."""

from fastad.eager.handle import Node

__all__ = ["Node"]
