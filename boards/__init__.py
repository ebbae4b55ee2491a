"""Board files shipped with pytest-ondevice (package data; see boards.py)."""
