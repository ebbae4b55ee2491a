"""The pytest side. In: pytest's config, options and collected files. Out: the session
plugin (built when a board is selected), one item per test case and board whose verdict comes
from the binary's result (run/), reports, JUnit properties and the terminal summaries.
"""
