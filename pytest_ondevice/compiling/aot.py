"""A model compiled ahead of time (XLA's tfcompile), linked into tests with no runtime.

TensorFlow's wheel ships tfcompile as `saved_model_cli aot_compile_cpu`: for a SavedModel
and a target triple it writes the kernels' object, the constants' object and a C++ header
whose class needs XLA's runtime and abseil, which no registry has for a cross target. The
kernels themselves have a plain C ABI (XLA's CPU kernel call frame), and the header's
`ThunkRunImplFunction()` is only a list of kernel calls over a table of buffers. So the
header is read here and a small C entry is written in its place: `<name>_run(inputs...,
outputs...)`, which lays out the buffers and calls the kernels in order (docs/aot.md).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from .toolchain import ToolchainError

SETUP = "scripts/setup.sh --aot (in a pytest-ondevice checkout), or pip install 'pytest-ondevice[aot]'"
CLI = "saved_model_cli"
ALIGN = 64  # XLA's buffers: the kernels may use aligned vector loads
COMPILE_TIMEOUT = 600
_KIND = {0: "constant", 1: "temp", 2: "entry"}  # EncodedBufferAllocationInfo's low two bits
_RESERVED = "od_"  # the entry's own names begin so
_C_TYPES = {
    "float": "float",
    "double": "double",
    "int8_t": "int8_t",
    "uint8_t": "uint8_t",
    "int16_t": "int16_t",
    "int32_t": "int32_t",
    "int64_t": "int64_t",
    "bool": "_Bool",
}


class AotError(ToolchainError):
    """A model that cannot be compiled for a board: names the model, the board and why."""


@dataclass(frozen=True)
class Compiler:
    cli: Path
    identity: str  # the CLI's path and TensorFlow's version: in every model's key


def compiler() -> Compiler:
    """tfcompile, as TensorFlow's wheel ships it, from this Python's environment or PATH."""
    here = Path(sys.prefix) / "bin" / CLI
    found = here if here.is_file() else (Path(p) if (p := shutil.which(CLI)) else None)
    if found is None:
        raise AotError(f"compiling a model needs TensorFlow's {CLI}, which is not installed: install it: {SETUP}")
    version = ""
    for dist in ("tensorflow-cpu", "tensorflow"):
        try:
            version = importlib.metadata.version(dist)
            break
        except importlib.metadata.PackageNotFoundError:
            continue
    identity = hashlib.sha256(f"{os.path.realpath(found)}\0{version}".encode()).hexdigest()[:16]
    return Compiler(found, identity)


def native_triple() -> str:
    """XLA's triple for this machine."""
    import platform

    machine = platform.machine().lower()
    return {"x86_64": "x86_64-pc-linux", "amd64": "x86_64-pc-linux"}.get(machine, f"{machine}-none-linux-gnu")


@dataclass(frozen=True)
class ModelSizes:
    text: int  # the kernels' code
    constants: int  # the weights as linked (padded, each with a 64-byte header)
    ram: int  # the buffers the C entry holds: arguments, results, temporaries


def sizes(program: Program, kernels: Path, constants: Path) -> ModelSizes:
    from . import elf

    def section(path: Path, prefix: str) -> int:
        try:
            return sum(s.size for s in elf.read(path).sections if s.name.startswith(prefix))
        except (OSError, elf.ElfError):
            return 0

    ram = sum(_padded(b.size) for b in program.buffers if b.kind != "constant")
    return ModelSizes(section(kernels, ".text"), section(constants, ".rodata"), ram)


def saved_model_digest(directory: Path) -> str:
    """The SavedModel's content: every file's path within it and bytes (read in blocks)."""
    h = hashlib.sha256()
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(directory)).encode() + b"\0")
        part = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                part.update(block)
        h.update(part.digest())
    return h.hexdigest()


def class_name(model: str) -> str:
    """tfcompile's class for a model: its name is in every symbol, so two models link together."""
    return "OdModel_" + model


def compile_model(
    tf: Compiler, saved_model: Path, signature: str, tag_set: str, cls: str, triple: str, cpu: str, out: Path
) -> subprocess.CompletedProcess:
    """Run tfcompile into out/ (model.h, model.o, model_constants.o)."""
    argv = [
        str(tf.cli), "aot_compile_cpu", "--dir", str(saved_model), "--tag_set", tag_set,
        "--signature_def_key", signature, "--output_prefix", str(out / "model"), "--cpp_class", cls,
        "--target_triple", triple, "--variables_to_feed", "",
    ]  # fmt: skip
    if cpu:
        argv += ["--target_cpu", cpu]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    try:
        return subprocess.run(argv, capture_output=True, text=True, errors="replace", env=env, timeout=COMPILE_TIMEOUT)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(argv, -9, "", f"tfcompile did not finish in {COMPILE_TIMEOUT} s")
    except OSError as e:
        return subprocess.CompletedProcess(argv, 127, "", f"tfcompile could not be started: {e}")


def failure(model: str, board: str, triple: str, result: subprocess.CompletedProcess) -> str:
    """tfcompile's own reason: XLA's fatal check, or the Python exception it died of, else
    its last lines without TensorFlow's start-up chatter and stack dumps."""
    text = result.stderr + result.stdout
    fatal = re.findall(r"^F\d{4} [^\]]*\] (.+)$", text, re.M)
    raised = re.findall(r"^(\w+(?:Error|Exception)\b.*)$", text, re.M)
    if fatal or raised:
        said = (fatal or raised)[-1]
    else:
        noise = r"^(WARNING|INFO|Instructions for|This API|[IW]\d{4}|\s+@|\s+File |\s*\^+$)|oneDNN|deprecat"
        lines = [line for line in text.splitlines() if line.strip() and not re.search(noise, line)]
        said = "\n".join(lines[-12:]) or "(it said nothing)"
    how = f"killed by signal {-result.returncode}" if result.returncode < 0 else f"exit status {result.returncode}"
    return f"model '{model}' could not be compiled for board '{board}' (target {triple}; tfcompile {how}): {said}"


@dataclass(frozen=True)
class Buffer:
    size: int
    kind: str  # constant, temp or entry (a parameter, a result, or the results' tuple)
    arg: int | None
    result: int | None


@dataclass(frozen=True)
class KernelCall:
    name: str
    args: tuple[tuple[int, int, int], ...]  # (buffer, offset, size)
    dims: tuple[int, int, int]


@dataclass(frozen=True)
class Tensor:
    name: str  # the feed's or fetch's, without tfcompile's prefix
    ctype: str
    count: int  # elements


@dataclass(frozen=True)
class Program:
    buffers: tuple[Buffer, ...]
    calls: tuple[KernelCall, ...]
    args: tuple[Tensor, ...]
    results: tuple[Tensor, ...]
    constants: tuple[str, ...]  # symbols, in the order of the constant buffers


class HeaderError(Exception):
    """tfcompile's header holds what the C entry cannot do (a thunk that needs XLA's runtime)."""


def read_header(text: str) -> Program:
    """The buffers, kernel calls and tensors of tfcompile's generated header."""
    thunks = re.findall(r"^\s*// (\w[\w ]*) Thunk\s*$", text, re.M)
    others = sorted({t for t in thunks if t != "Kernel"})
    if others:
        raise HeaderError(
            f"it compiles to {', '.join(t + ' Thunk' for t in others)}, which calls XLA's runtime "
            "(Eigen's convolution, sort, RNG or a custom call): only models whose every step is a kernel "
            "(dense layers, elementwise operations) run without a runtime"
        )
    buffers = tuple(
        Buffer(int(packed) >> 2, _KIND.get(int(packed) & 3, "?"), _index(arg), _index(res))
        for packed, arg, res in re.findall(r"EncodedBufferAllocationInfo\{(\d+)ULL, (~0U|\d+U), (~0U|\d+U)\}", text)
    )
    calls = []
    for block in re.split(r"//\s*Kernel Thunk", text)[1:]:
        args = tuple(
            (int(b), int(o), int(s))
            for b, o, s in re.findall(
                r"XLA_CPU_KernelArg\{reinterpret_cast<std::byte\*>\(buffer_table\[(\d+)\]\) \+ (\d+), (\d+)\}", block
            )
        )
        dims = re.search(r"XLA_CPU_NumWorkGroups kernel_thread_dims = \{\s*(\d+),\s*(\d+),\s*(\d+),?\s*\}", block)
        name = re.search(r"\(\*(\w+)\)\(&call_frame\)", block)
        if not (args and dims and name):
            raise HeaderError(
                "a kernel call in tfcompile's header has a form this version of pytest-ondevice does not read"
            )
        calls.append(KernelCall(name.group(1), args, (int(dims.group(1)), int(dims.group(2)), int(dims.group(3)))))
    constants = tuple(re.findall(r"\((__tfcompile_\w+_Constant_\d+_constant_buffer_contents)\)", text))
    program = Program(buffers, tuple(calls), _tensors(text, "arg"), _tensors(text, "result"), constants)
    if not buffers or not calls or len(constants) != sum(b.kind == "constant" for b in buffers):
        raise HeaderError("tfcompile's header does not list its buffers, kernels and constants as expected")
    return program


def _index(text: str) -> int | None:
    return None if text == "~0U" else int(text.rstrip("U"))


def _tensors(text: str, what: str) -> tuple[Tensor, ...]:
    names = re.search(
        rf"Static{what.capitalize()}Names\(\) \{{\s*static const char\* kNames\[\] = \{{([^}}]*)\}}", text
    )
    listed = re.findall(r'"([^"]+)"', names.group(1)) if names else []
    found = []
    for i, name in enumerate(listed):
        shape = re.search(rf"return \(\*static_cast<const (\w+)\(\*\)((?:\[\d+\])+)>\(\s*{what}_data\({i}\)", text)
        if shape is None or shape.group(1) not in _C_TYPES:
            raise HeaderError(f"tfcompile's header gives {what} {name} a type this C entry does not support")
        count = 1
        for dim in re.findall(r"\[(\d+)\]", shape.group(2)):
            count *= int(dim)
        found.append(Tensor(re.sub(r"^(feed|fetch)_", "", name), _C_TYPES[shape.group(1)], count))
    return tuple(found)


def c_entry(program: Program, name: str) -> tuple[str, str]:
    """The C header and source of `<name>_run`, from what tfcompile's header says."""
    upper = name.upper()
    names = [t.name for t in (*program.args, *program.results)]
    clash = sorted({n for n in names if names.count(n) > 1 or n.startswith(_RESERVED) or not n.isidentifier()})
    if clash:
        raise HeaderError(f"its inputs and outputs are named {', '.join(clash)}: rename them in the signature "
                          "(each a distinct C identifier)")  # fmt: skip
    params = [f"const {t.ctype} *{t.name}" for t in program.args] + [f"{t.ctype} *{t.name}" for t in program.results]
    header = [
        f"/* {name}: a model compiled ahead of time by XLA (tfcompile), called with no runtime.",
        " * Generated by pytest-ondevice from tfcompile's header: do not edit. */",
        f"#ifndef ONDEVICE_AOT_{upper}_MODEL_H_",
        f"#define ONDEVICE_AOT_{upper}_MODEL_H_",
        "#include <stdint.h>",
        "#ifdef __cplusplus",
        'extern "C" {',
        "#endif",
    ]
    for t in (*program.args, *program.results):
        header.append(f"#define {upper}_{t.name.upper()}_COUNT {t.count} /* elements of {t.ctype} */")
    ram = sum(_padded(b.size) for b in program.buffers if b.kind != "constant")
    constant = sum(b.size for b in program.buffers if b.kind == "constant")
    header += [
        f"#define {upper}_RAM_BYTES {ram} /* its buffers: arguments, results, temporaries */",
        f"#define {upper}_CONSTANT_BYTES {constant} /* its weights */",
        "/* 0: done; -1: a kernel reported an error; -2: the constants are not the ones the kernels expect */",
        f"int {name}_run({', '.join(params)});",
        "#ifdef __cplusplus",
        "}",
        "#endif",
        "#endif",
    ]
    src = [
        "/* Generated by pytest-ondevice from tfcompile's header: do not edit. It lays out the",
        " * model's buffers and calls its kernels through XLA's CPU kernel call frame, whose",
        " * argument count and sizes are 64-bit on every target (not size_t). */",
        "#include <stdint.h>",
        "#include <string.h>",
        f'#include "{name}_model.h"',
        "typedef struct { uint64_t x, y, z; } od_xla_dims;",
        "typedef struct { void *data; int64_t size; } od_xla_arg;",
        "typedef struct { const od_xla_dims *num_workgroups; const od_xla_dims *workgroup_id; int64_t num_args;",
        "                 const od_xla_arg *args; } od_xla_frame;",
    ]
    src += [f"void *{k}(const od_xla_frame *frame);" for k in dict.fromkeys(c.name for c in program.calls)]
    src += [f"extern const char {c}[];" for c in program.constants]
    for i, b in enumerate(program.buffers):
        if b.kind != "constant":
            src.append(f"static uint8_t od_buffer_{i}[{_padded(b.size)}] __attribute__((aligned({ALIGN})));")
    src.append(f"int {name}_run({', '.join(params)}) {{")
    src.append(f"  void *od_table[{len(program.buffers)}];")
    constants = iter(program.constants)
    for i, b in enumerate(program.buffers):
        if b.kind == "constant":
            symbol = next(constants)
            src += [
                "  {",
                "    uint64_t od_size;",
                f"    memcpy(&od_size, {symbol}, sizeof od_size);",
                f"    if (od_size != {b.size}u) return -2;",
                f"    od_table[{i}] = (void *)({symbol} + 64);",
                "  }",
            ]
        else:
            src.append(f"  od_table[{i}] = od_buffer_{i};")
    for i, b in enumerate(program.buffers):
        if b.arg is not None:
            t = program.args[b.arg]
            src.append(f"  memcpy(od_buffer_{i}, {t.name}, sizeof *{t.name} * {t.count});")
    for call in program.calls:
        args = ", ".join(f"{{(uint8_t *)od_table[{b}] + {o}, {s}}}" for b, o, s in call.args)
        x, y, z = call.dims
        src += [
            "  {",
            f"    const od_xla_arg od_args[{len(call.args)}] = {{{args}}};",
            f"    const od_xla_dims od_dims = {{{x}, {y}, {z}}};",
            f"    for (uint64_t od_z = 0; od_z < {z}; ++od_z)",
            f"      for (uint64_t od_y = 0; od_y < {y}; ++od_y)",
            f"        for (uint64_t od_x = 0; od_x < {x}; ++od_x) {{",
            "          const od_xla_dims od_id = {od_x, od_y, od_z};",
            f"          const od_xla_frame od_frame = {{&od_dims, &od_id, {len(call.args)}, od_args}};",
            f"          if ({call.name}(&od_frame)) return -1;",
            "        }",
            "  }",
        ]
    for i, b in enumerate(program.buffers):
        if b.result is not None:
            t = program.results[b.result]
            src.append(f"  memcpy({t.name}, od_buffer_{i}, sizeof *{t.name} * {t.count});")
    src += ["  return 0;", "}"]
    return "\n".join(header) + "\n", "\n".join(src) + "\n"


def _padded(size: int) -> int:
    return max(ALIGN, (size + ALIGN - 1) // ALIGN * ALIGN)


def write_if_changed(path: Path, text: str) -> bool:
    """A generated file is rewritten only when its text changes: what includes it stays built.
    Whether it was written (the caller lets the build cache see it as settled first)."""
    try:
        if path.read_text() == text:
            return False
    except OSError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
    tmp.write_text(text)
    os.replace(tmp, path)
    return True
