"""Board files and ondevice.toml: validation errors name the file and the key."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from pytest_ondevice.config.board import BoardRegistry
from pytest_ondevice.config.dirconfig import load
from pytest_ondevice.config.schema import ConfigError


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
    with pytest.raises(ConfigError, match=r"d.toml: 'transport.device_jobs' must be an integer, not a string"):
        BoardRegistry([tmp_path]).get("d")
    write(tmp_path / "z.toml", 'kind="linux"\narch="x"\n[transport]\nname="ssh"\ndevice_jobs=0\n')
    with pytest.raises(ConfigError, match=r"z.toml: key 'transport.device_jobs' must be a whole number >= 1"):
        BoardRegistry([tmp_path]).get("z")
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
    write(tmp_path / "slow_test.c", "")
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
        [sys.executable, "-m", "pytest_ondevice.commands.cli", "boards"], capture_output=True, text=True, check=True
    )
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["board", "kind", "arch", "toolchain", "transport"]
    host = next(line for line in lines if line.startswith("host "))
    assert "found: cc" in host and host.endswith("local (ready)")


PROJECT_INI = {
    "pytest.ini": "[pytest]\nondevice_boards = boards\n",
    "pyproject.toml": '[tool.pytest.ini_options]\nondevice_boards = ["boards"]\n',
    "tox.ini": "[pytest]\nondevice_boards = boards\n",
    "setup.cfg": "[tool:pytest]\nondevice_boards = boards\n",
}


@pytest.mark.parametrize("ini", sorted(PROJECT_INI))
def test_cli_lists_the_projects_own_boards_from_its_ini(tmp_path, ini):
    """`pytest-ondevice boards` sees what a run started here sees: the ini is found from the cwd up."""
    write(tmp_path / ini, PROJECT_INI[ini])
    write(tmp_path / "boards" / "mine.toml", 'extends = "host"\n')
    write(tmp_path / "extra" / "theirs.toml", 'extends = "host"\n')
    (tmp_path / "tests").mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest_ondevice.commands.cli", "boards", "--boards-dir", str(tmp_path / "extra")],
        capture_output=True,
        text=True,
        cwd=tmp_path / "tests",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    names = [line.split()[0] for line in proc.stdout.splitlines()[1:]]
    assert {"mine", "theirs", "host"} <= set(names), proc.stdout


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


# -- typos are errors naming the file and the key (issue 17, configuration input) --------


@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf", "-inf"])
def test_a_board_timeout_must_be_a_finite_number_of_seconds_above_zero(tmp_path, value):
    path = write(tmp_path / "t.toml", f'extends = "host"\ntimeout = {value}\n')
    with pytest.raises(ConfigError, match=r"'timeout' must be a number of seconds > 0") as e:
        BoardRegistry([tmp_path]).get("t")
    assert str(path) in str(e.value)


@pytest.mark.parametrize(
    "text, key",
    [
        ("timeout = 0\n", "'timeout'"),
        ("timeout = -5\n", "'timeout'"),
        ("timeout = nan\n", "'timeout'"),
        ('[files."x_test.c"]\ntimeout = -1\n', "'files.x_test.c.timeout'"),
        ('[files."x_test.c"]\ntimeout = inf\n', "'files.x_test.c.timeout'"),
    ],
)
def test_a_dirconfig_timeout_must_be_a_finite_number_of_seconds_above_zero(tmp_path, text, key):
    write(tmp_path / "x_test.c", "")
    cfg = write(tmp_path / "ondevice.toml", text)
    with pytest.raises(ConfigError, match=rf"{key} must be a number of seconds > 0") as e:
        load(cfg, tmp_path)
    assert str(cfg) in str(e.value)


def test_a_good_timeout_is_kept(tmp_path):
    write(tmp_path / "x_test.c", "")
    cfg = write(tmp_path / "ondevice.toml", 'timeout = 0.5\n[files."x_test.c"]\ntimeout = 3\n')
    assert load(cfg, tmp_path).for_file(tmp_path / "x_test.c").timeout == 3
    write(tmp_path / "b" / "t.toml", 'extends = "host"\ntimeout = 2\n')
    assert BoardRegistry([tmp_path / "b"]).get("t").timeout == 2


def test_an_include_dir_that_does_not_exist_names_file_and_entry(tmp_path):
    (tmp_path / "inc").mkdir()
    cfg = write(tmp_path / "ondevice.toml", 'include_dirs = ["inc", "incl"]\n')
    with pytest.raises(ConfigError, match=r"'include_dirs' entry 'incl' does not exist") as e:
        load(cfg, tmp_path)
    assert str(cfg) in str(e.value)
    write(tmp_path / "x_test.c", "")
    write(tmp_path / "plain", "")
    cfg = write(tmp_path / "ondevice.toml", '[files."x_test.c"]\ninclude_dirs = ["plain"]\n')
    with pytest.raises(ConfigError, match=r"'files.x_test.c.include_dirs' entry 'plain' is not a directory"):
        load(cfg, tmp_path)


def test_a_per_file_override_naming_no_file_is_an_error(tmp_path):
    write(tmp_path / "kernels" / "slow_test.c", "")
    cfg = write(tmp_path / "ondevice.toml", '[files."slwo_test.c"]\ntimeout = 9\n')
    with pytest.raises(ConfigError, match=r"\[files.'slwo_test.c'\] names no file") as e:
        load(cfg, tmp_path)
    assert str(cfg) in str(e.value)
    for name in ("slow_test.c", "kernels/slow_test.c"):  # by name anywhere below, or by path
        cfg.write_text(f'[files."{name}"]\ntimeout = 9\n')
        assert load(cfg, tmp_path).for_file(tmp_path / "kernels" / "slow_test.c").timeout == 9
    cfg.write_text('[files."slow_test.c/x"]\ntimeout = 9\n')
    with pytest.raises(ConfigError, match=r"names no file"):
        load(cfg, tmp_path)


def test_an_unknown_transport_key_names_file_and_key(tmp_path):
    path = write(tmp_path / "q.toml", 'extends = "bluepill-qemu"\n[transport]\nmachin = "x"\n')
    with pytest.raises(ConfigError) as e:
        BoardRegistry([tmp_path]).get("q")
    assert str(path) in str(e.value)
    assert "unknown key 'transport.machin' (did you mean 'transport.machine'?)" in str(e.value)
    write(tmp_path / "s.toml", 'kind="linux"\narch="x"\n[transport]\nname="ssh"\nhots="pi"\n')
    with pytest.raises(ConfigError, match=r"s.toml: unknown key 'transport.hots' \(did you mean 'transport.host'\?\)"):
        BoardRegistry([tmp_path]).get("s")
    write(tmp_path / "e.toml", 'extends = "rpi"\n[emulator]\nsysrot = "/x"\n')
    with pytest.raises(ConfigError, match=r"e.toml: unknown key 'emulator.sysrot' \(did you mean 'emulator.sysroot'"):
        BoardRegistry([tmp_path]).get("e")


def test_transport_keys_are_checked_against_the_transport_in_effect(tmp_path):
    # the rpi's ssh keys (host, device_jobs) are inherited, not written here: no error
    write(tmp_path / "local-pi.toml", 'extends = "rpi"\n[transport]\nname = "local"\n')
    assert BoardRegistry([tmp_path]).get("local-pi").transport_name == "local"
    # a transport this version does not have: the file, and the transports there are
    write(tmp_path / "jtag.toml", 'extends = "bluepill"\n[transport]\nname = "jtag"\nprobe = "x"\n')
    with pytest.raises(ConfigError, match=r"jtag.toml: 'transport': unknown transport 'jtag'.*known transports: adb,"):
        BoardRegistry([tmp_path]).get("jtag")


def test_transport_option_types_are_checked_at_load(tmp_path):
    write(tmp_path / "t.toml", 'extends = "rpi"\n[transport]\ncache_entries = "many"\n')
    with pytest.raises(ConfigError, match=r"t.toml: 'transport.cache_entries' must be an integer, not a string"):
        BoardRegistry([tmp_path]).get("t")
    write(tmp_path / "w.toml", 'extends = "rpi"\n[transport]\nexec_wrapper = 3\n')
    with pytest.raises(ConfigError, match=r"w.toml: 'transport.exec_wrapper' must be a command"):
        BoardRegistry([tmp_path]).get("w")


def test_every_key_a_transport_reads_is_declared():
    """The declared options follow the code: a key read but not declared would make its
    boards fail to load; one declared but never read would let a typo through."""
    import re

    from pytest_ondevice import transports

    src = Path(__file__).resolve().parent.parent / "transports"
    pattern = re.compile(
        r"""(?:options|\bo)(?:\.get\(|\[)\s*["']([a-z_]+)["']"""  # options.get("k"), o["k"]
        r"""|["']([a-z_]+)["'] in (?:self\.options|o)\b"""  # "k" in self.options
    )
    shared = {k for f in ("linuxdevice.py",) for a, b in pattern.findall((src / f).read_text()) for k in (a or b,)}
    by_module: dict[str, set[str]] = {}
    for name in transports.known():
        cls = transports.load(name)
        by_module.setdefault(cls.__module__.rsplit(".", 1)[-1], set()).update(cls.options)
    for module, declared in by_module.items():
        read = {a or b for a, b in pattern.findall((src / f"{module}.py").read_text())}
        assert read - shared <= declared | {"name"}, module  # read, never declared
        assert declared <= read | shared, module  # declared, never read


def test_a_broken_board_file_does_not_hide_the_board_asked_for(tmp_path):
    broken = write(tmp_path / "broken.toml", "kind = \n")
    write(tmp_path / "mine.toml", 'extends = "hots"\n')
    reg = BoardRegistry([tmp_path])
    with pytest.raises(ConfigError) as e:
        reg.get("rpii")
    assert "unknown board 'rpii' (did you mean 'rpi'?)" in str(e.value) and str(broken) not in str(e.value)
    with pytest.raises(ConfigError) as e:
        reg.get("mine")
    assert "mine.toml: 'extends': unknown board 'hots' (did you mean 'host'?)" in str(e.value)
    assert str(broken) not in str(e.value)
    assert reg.get("host").name == "host"
    with pytest.raises(ConfigError, match=r"broken.toml: not valid TOML"):
        reg.get("broken")


def test_the_board_list_shows_a_broken_file_and_fails(tmp_path):
    import io

    from pytest_ondevice.commands.cli import print_boards

    write(tmp_path / "broken.toml", "kind = \n")
    out = io.StringIO()
    assert print_boards(BoardRegistry([tmp_path]), out) == 1
    lines = out.getvalue().splitlines()
    assert any(line.startswith("host ") and "local (ready)" in line for line in lines)
    assert any(line.split()[:4] == ["broken", "-", "-", "invalid"] for line in lines)
    assert f"error: {tmp_path / 'broken.toml'}: not valid TOML" in out.getvalue()


def test_every_transport_ini_option_is_registered_with_pytest():
    """pytest learns ini names from entry points (no transport loads at start-up): the
    declarations and the entry points must agree."""
    from importlib.metadata import distribution

    from pytest_ondevice.transports import declared_ini

    eps = {
        ep.name: ep.value for ep in distribution("pytest-ondevice").entry_points if ep.group == "pytest_ondevice.ini"
    }
    assert set(eps) == set(declared_ini())


def test_every_runtime_file_of_a_shipped_board_is_in_the_wheel():
    """The wheel ships the boards/ tree whole (setup.py; test_installed_wheel.py checks the
    built wheel against the tree): a board whose runtime (or a file it #includes) lies
    outside it works from a checkout and breaks once installed."""
    boards = Path(__file__).resolve().parents[1] / "boards"
    reg = BoardRegistry()
    for name in reg.names():
        for path in reg.get(name).toolchain.runtime:
            assert path.resolve().is_relative_to(boards), f"{name}: {path} is outside boards/, not in the wheel"


@pytest.mark.parametrize("key", ["ondevice_cache_size", "ondevice_log_max"])
def test_a_size_that_is_not_one_is_a_usage_error_naming_the_ini_key(pytester, key):
    pytester.makeini(f"[pytest]\n{key} = lots\n")
    result = pytester.runpytest("--board=host")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{key}: not a size: 'lots' (write e.g. 5G or 500M)*"])
