"""Board files and ondevice.toml: validation errors name the file and the key."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from pytest_ondevice.board import BoardRegistry
from pytest_ondevice.dirconfig import load
from pytest_ondevice.schema import ConfigError


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_builtin_host_board_loads():
    board = BoardRegistry().get("host")
    assert board.kind == "host" and board.transport_name == "local"
    assert all(p.is_file() for p in board.toolchain.runtime)


def test_unknown_board_suggests_the_closest_name():
    with pytest.raises(ConfigError, match=r"unknown board 'hots' \(did you mean 'host'\?\)"):
        BoardRegistry().get("hots")


def test_typo_in_a_board_file_names_the_file_and_the_key(tmp_path):
    path = write(
        tmp_path / "myboard.toml",
        'kind = "linux"\narch = "aarch64"\n[toolchian]\ngnu = "x"\n[transport]\nname="local"\n',
    )
    with pytest.raises(ConfigError) as e:
        BoardRegistry([tmp_path]).get("myboard")
    assert str(path) in str(e.value)
    assert "unknown key 'toolchian' (did you mean 'toolchain'?)" in str(e.value)


def test_nested_typo_and_wrong_type(tmp_path):
    write(tmp_path / "a.toml", 'kind="linux"\narch="x"\n[toolchain]\ncflag=["-O2"]\n[transport]\nname="local"\n')
    with pytest.raises(
        ConfigError, match=r"a.toml: unknown key 'toolchain.cflag' \(did you mean 'toolchain.cflags'\?\)"
    ):
        BoardRegistry([tmp_path]).get("a")
    write(tmp_path / "b.toml", 'kind="linux"\narch="x"\ntimeout="soon"\n[transport]\nname="local"\n')
    with pytest.raises(ConfigError, match=r"b.toml: 'timeout' must be a number, not a string"):
        BoardRegistry([tmp_path]).get("b")
    write(tmp_path / "c.toml", 'kind="rtos"\narch="x"\n[transport]\nname="local"\n')
    with pytest.raises(ConfigError, match=r"c.toml: 'kind' must be one of host, linux, baremetal"):
        BoardRegistry([tmp_path]).get("c")


def test_device_jobs_must_be_a_positive_whole_number(tmp_path):
    write(tmp_path / "d.toml", 'kind="linux"\narch="x"\n[transport]\nname="ssh"\ndevice_jobs="all"\n')
    with pytest.raises(ConfigError, match=r"d.toml: key 'transport.device_jobs' must be a whole number >= 1"):
        BoardRegistry([tmp_path]).get("d")
    assert BoardRegistry().get("rpi").device_jobs == 2
    assert BoardRegistry().get("bluepill-qemu").device_jobs == 1


def test_missing_field_names_the_key(tmp_path):
    write(tmp_path / "nokind.toml", 'arch = "x"\n[transport]\nname = "local"\n')
    with pytest.raises(ConfigError, match=r"nokind.toml: missing key 'kind'"):
        BoardRegistry([tmp_path]).get("nokind")


def test_invalid_toml_names_the_file(tmp_path):
    write(tmp_path / "bad.toml", "kind = \n")
    with pytest.raises(ConfigError, match=r"bad.toml: not valid TOML"):
        BoardRegistry([tmp_path]).get("bad")


def test_user_board_extends_a_builtin_and_overrides_only_what_differs(tmp_path):
    write(tmp_path / "host-slow.toml", 'extends = "host"\ntimeout = 300\n')
    board = BoardRegistry([tmp_path]).get("host-slow")
    assert board.timeout == 300
    assert board.toolchain == BoardRegistry().get("host").toolchain


def test_dirconfig_typo_names_file_and_key(tmp_path):
    cfg = write(tmp_path / "ondevice.toml", 'sources = []\ninclude_dir = ["x"]\n')
    with pytest.raises(ConfigError) as e:
        load(cfg, tmp_path)
    assert str(cfg) in str(e.value)
    assert "unknown key 'include_dir' (did you mean 'include_dirs'?)" in str(e.value)


def test_dirconfig_source_glob_matching_nothing_is_an_error(tmp_path):
    cfg = write(tmp_path / "sub" / "ondevice.toml", 'sources = ["kernels/*.c"]\n')
    with pytest.raises(ConfigError, match=r"'sources' entry 'kernels/\*.c' matches no file"):
        load(cfg, tmp_path)


def test_dirconfig_per_file_override(tmp_path):
    write(tmp_path / "lib" / "k.c", "int k;\n")
    cfg = write(
        tmp_path / "ondevice.toml",
        'sources = ["lib/*.c"]\ndefines = ["A=1"]\ntimeout = 10\n'
        '[files."slow_test.c"]\ntimeout = 99\ndefines = ["B=2"]\n',
    )
    config = load(cfg, tmp_path)
    slow = config.for_file(tmp_path / "slow_test.c")
    assert (slow.flags.defines, slow.extra_sources, slow.timeout) == (("A=1", "B=2"), (), 99)
    assert config.for_file(tmp_path / "other_test.c").timeout == 10
    assert [p.name for p in config.sources] == ["k.c"]


def test_bad_board_on_the_command_line_is_a_usage_error(pytester):
    result = pytester.runpytest("--board=rpii4")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unknown board 'rpii4'*known boards:*host*"])


def test_cli_lists_boards_with_toolchain_and_transport():
    proc = subprocess.run(
        [sys.executable, "-m", "pytest_ondevice.cli", "boards"], capture_output=True, text=True, check=True
    )
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["board", "kind", "arch", "toolchain", "transport"]
    host = next(line for line in lines if line.startswith("host "))
    assert "found: cc" in host and host.endswith("local (ready)")


def test_console_script_is_installed():
    script = Path(sysconfig.get_path("scripts")) / "pytest-ondevice"  # where pip put it for this Python
    proc = subprocess.run([str(script), "boards"], capture_output=True, text=True)
    assert proc.returncode == 0 and "host" in proc.stdout


def test_list_boards_option(pytester):
    result = pytester.runpytest("--list-boards")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["board*kind*arch*toolchain*transport", "host*local (ready)"])


def test_transports_are_installed_under_the_plugin_package():
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import importlib.util as u; print(u.find_spec('transports') is None, "
            "u.find_spec('pytest_ondevice.transports.local') is not None)",
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd="/",
    )
    assert proc.stdout.split() == ["True", "True"]
