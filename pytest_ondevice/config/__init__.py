"""What a run is asked to do. In: board files, ondevice.toml, pytest's options and ini.
Out: checked Board and DirConfig objects, and errors naming the file and key."""
