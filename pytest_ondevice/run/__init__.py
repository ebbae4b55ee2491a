"""One binary's life. In: what to build and run for a board (BinarySpec), the board's
devices (farm) and transport. Out: one result per binary (results.py: verdicts, or the
error that kept it from them) with every attempt it took.

    life.py         the life, read top to bottom: build, place, deploy, run, parse, and every retry
    failover.py     the fleet's rule: which device next, and what an error there means
    unusable.py     a run that shows its device cannot run the binary at all
    ways.py         how the session's binaries run (in process, ahead on threads, in a side
                    process), chosen once
    sideprocess.py  the forked process and its pipe; messages.py what goes over it
    engine.py       what the session's binaries share: builder, devices, counters, the way
    spec.py, results.py  what enters and what leaves
"""
