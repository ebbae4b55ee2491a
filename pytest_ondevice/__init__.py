"""pytest-ondevice: build C/C++ tests for a board, run them there, one pytest item per case."""

__version__ = "0.1.0"
