"""The `pytest-ondevice` command's tools. In: the project's ini, board files, the fleet, the
build store and the run history. Out: tables and pages for people (`boards`, `cache`,
`doctor`, `report`, `bisect`, `docs`, `nightly`), and exit codes for scripts.
"""
