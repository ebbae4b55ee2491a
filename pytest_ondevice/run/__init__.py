"""One binary's life. In: what to build and run for a board (BinarySpec), the board's
devices (farm) and transport. Out: one result per binary (verdicts, or the error that kept it
from them) with every attempt it took.

    life.py     the life read top to bottom: build, place, deploy, run, parse, and every retry
    ...
"""
