"""A directory's models compiled ahead of time for a board: tfcompile's kernels and
constants from the store, and the C entry made from its header, compiled like any source
(aot.py drives tfcompile and writes the entry)."""

from __future__ import annotations

import functools
import hashlib
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ..config.board import Board
from ..config.dirconfig import BuildFlags, DirConfig, Model
from .buildstats import BuildStats
from .linking import check_arch
from .memo import SessionMemo
from .progress import BuildProgress
from .reuse import TOO_NEW_NS, Reuse
from .store import key_of
from .toolchain import ResolvedToolchain

if TYPE_CHECKING:
    from . import aot

CompileSource = Callable[[Board, ResolvedToolchain, Path, BuildFlags], Path]


class AotModels:
    def __init__(
        self,
        root: Path,
        reuse: Reuse,
        memo: SessionMemo,
        stats: BuildStats,
        progress: BuildProgress,
        compile_source: CompileSource,
    ) -> None:
        """root: the build dir, where each model's C entry is written; compile_source: how
        the builder compiles that entry (its flags, its cache)."""
        self.root = root
        self.reuse = reuse
        self.memo = memo
        self.stats = stats
        self.progress = progress
        self.compile_source = compile_source
        self.sizes: dict[tuple[str, str], aot.ModelSizes] = {}  # (board, model): what it takes
        self._lock = threading.Lock()

    def objects(self, board: Board, tc: ResolvedToolchain, cfg: DirConfig) -> tuple[list[Path], tuple[Path, ...]]:
        """The objects of the directory's models for this board (each compiled once per
        session), and where their generated headers are."""
        objects: list[Path] = []
        dirs: list[Path] = []
        for model in cfg.models:
            compile_model = functools.partial(self._model, board, tc, cfg, model)
            found, where = self.memo.once(("aot", board.name, model), compile_model)
            objects += found
            dirs.append(where)
        return objects, tuple(dirs)

    def _model(self, board: Board, tc: ResolvedToolchain, cfg: DirConfig, model: Model) -> tuple[list[Path], Path]:
        """tfcompile's kernels and constants, from the store (keyed by the SavedModel's content,
        TensorFlow's version, the triple and the CPU), and the C entry made from its header."""
        from . import aot  # imported by a directory that declares a model, not by every run

        if not board.aot.triple:
            raise aot.AotError(
                f"model '{model.name}' ({cfg.path}) cannot be compiled for board '{board.name}': its board file "
                'has no [aot] triple (XLA\'s target triple, e.g. triple = "armv7em-none-eabihf", cpu = "cortex-m4")'
            )
        triple = aot.native_triple() if board.aot.triple == "native" else board.aot.triple
        tf = aot.compiler()
        try:
            content = aot.saved_model_digest(model.saved_model)
        except OSError as e:
            raise aot.AotError(f"model '{model.name}': cannot read {model.saved_model}: {e.strerror}") from None
        key = key_of(
            "aot",
            tf.identity,
            content,
            triple,
            board.aot.cpu,
            model.signature,
            model.tag_set,
            aot.class_name(model.name),
        )
        made: dict[str, Path] = {}

        def produce(which: str) -> Callable[[Path], object]:
            def into(out: Path) -> None:
                if not made:
                    self.progress.started(f"{board.name}: model {model.name} (tfcompile)")
                    staged = self.reuse.store.staging()
                    result = aot.compile_model(
                        tf,
                        model.saved_model,
                        model.signature,
                        model.tag_set,
                        aot.class_name(model.name),
                        triple,
                        board.aot.cpu,
                        staged,
                    )
                    if result.returncode != 0 or not (staged / "model_constants.o").is_file():
                        raise aot.AotError(aot.failure(model.name, board.name, triple, result))
                    made["dir"] = staged
                    self.stats.count("compiled", key)
                shutil.copyfile(made["dir"] / which, out)

            return into

        stored = self.reuse.stored
        header = stored(key_of(key, "header"), "model.h", produce("model.h"))
        kernels = stored(key_of(key, "kernels"), f"{model.name}.o", produce("model.o"))
        constants = stored(key_of(key, "constants"), f"{model.name}_constants.o", produce("model_constants.o"))
        if not made:
            self.stats.count("reused", key)
        check_arch(kernels, board, f"model '{model.name}'")
        try:
            program = aot.read_header(header.read_text(errors="replace"))
        except aot.HeaderError as e:
            raise aot.AotError(
                f"model '{model.name}' cannot run on board '{board.name}' without XLA's runtime: {e}"
            ) from None
        # one directory per SavedModel: two ondevice.toml may each name a model "mlp"
        place = hashlib.sha256(str(model.saved_model).encode()).hexdigest()[:10]
        where = self.root / board.name / "aot" / f"{model.name}-{place}"
        try:
            h_text, c_text = aot.c_entry(program, model.name)
        except aot.HeaderError as e:
            raise aot.AotError(f"model '{model.name}' ({model.saved_model}): {e}") from None
        written = aot.write_if_changed(where / f"{model.name}_model.h", h_text)
        written = aot.write_if_changed(where / f"{model.name}_model.c", c_text) or written
        if written:  # a file this new could be half-written to the store's eye: let it settle
            time.sleep(TOO_NEW_NS * 1.5 / 1e9)
        entry = self.compile_source(board, tc, where / f"{model.name}_model.c", BuildFlags(include_dirs=(where,)))
        with self._lock:
            self.sizes[(board.name, model.name)] = aot.sizes(program, kernels, constants)
        return [entry, kernels, constants], where
