"""``popjit run``: run a program written for Graphcore's TensorFlow, unmodified, on popjit.

    popjit run script.py [args]        python -m popjit run script.py [args]
    popjit run -m package.module [args]
    popjit run -c "import tensorflow as tf; print(tf.constant(1.0))" [args]

Two parts. :func:`install_hook` puts a finder at the front of ``sys.meta_path`` that makes
``tensorflow`` (and ``tensorflow.compat.v1``, ``tensorflow.keras``, ``tensorflow.python.ipu``,
``tensorflow.python.keras``, ``keras``, Graphcore's ``ipu_tensorflow_addons`` and ``popdist``, and every
module below them) the very module objects of popjit, so ``import tensorflow as tf; tf is popjit.tensorflow``.
Nothing installs it but this command, and only in the process it runs in: importing popjit leaves
``import tensorflow`` alone, and a real TensorFlow installed beside popjit stays what every other
process imports.

Then the program runs as ``python`` would run it: through :mod:`runpy` as ``__main__``, with
``sys.argv`` and ``sys.path[0]`` set as the interpreter sets them. Exceptions, ``sys.exit`` codes
and ``KeyboardInterrupt`` leave :func:`main` untouched, so the interpreter reports them exactly
as for ``python script.py``; a wrapper around ``sys.excepthook`` only drops popjit's own frames
from the front of the traceback, so it starts at the user's first line.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import linecache
import logging
import os
import runpy
import sys
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from importlib.machinery import ModuleSpec
from typing import Any

from popjit import config
from popjit.aliases import AliasFinder
from popjit.errors import FailedPreconditionError
from popjit.runtime import instances
from popjit.support import Status, graphcore_name, lookup

USAGE = "usage: popjit run [-h] [-v] [--tf1] (SCRIPT | -m MODULE | -c CODE) [ARGS ...]"
HELP = f"""{USAGE}

Run a program written for Graphcore's IPU TensorFlow, unmodified, on popjit. Inside this process
only, `import tensorflow` (and tensorflow.compat.v1, tensorflow.keras, tensorflow.python.ipu,
tensorflow.python.keras, keras, ipu_tensorflow_addons, popdist) resolve to popjit's modules; a real TensorFlow
installed beside popjit is untouched. sys.argv, __name__ == "__main__", exit codes and tracebacks behave as with
`python SCRIPT ARGS`. Started as one of several instances (by `popjit poprun`, or `mpiexec -n N python -m popjit
run SCRIPT`), it connects to the others first, and a failure in one stops them all.

  -v, --verbose
              log popjit's compile phases with their times (and its other INFO messages) to stderr
  --tf1       run a TensorFlow 1.15 program: `import tensorflow` is tensorflow.compat.v1 (chosen by itself
              for a script that uses tf.placeholder, tf.Session, tf.train.<Name>Optimizer...)
  SCRIPT      a Python file (or a directory or zip file with a __main__.py)
  -m MODULE   run a module as a script, as `python -m MODULE`
  -c CODE     run the program passed as a string, as `python -c CODE`
  ARGS        passed to the program in sys.argv[1:]
"""
USAGE_ERROR = 2  # the status python and argparse give a bad command line


# -- the import hook -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Alias:
    """``name`` resolves to the module ``target``; ``name.<sub>`` to ``<children>.<sub>``."""

    name: str
    target: str
    children: str = ""

    def resolve(self, fullname: str) -> str | None:
        """The popjit module ``fullname`` stands for, or None if this alias does not cover it."""
        if fullname == self.name:
            return self.target
        if fullname.startswith(self.name + "."):
            return (self.children or self.target) + fullname[len(self.name):]
        return None


# The most specific alias that covers a name wins (they are tried longest first).
ALIASES: tuple[Alias, ...] = (
    Alias("tensorflow", "popjit.tensorflow"),
    Alias("tensorflow.compat.v1", "popjit.tensorflow.compat.v1", children="popjit.tensorflow"),
    Alias("tensorflow.compat.v2", "popjit.tensorflow"),
    Alias("tensorflow.python.ipu", "popjit.ipu"),
    Alias("tensorflow.python.keras", "popjit.tensorflow.keras"),
    Alias("keras", "popjit.tensorflow.keras"),
    Alias("ipu_tensorflow_addons", "popjit.ipu_tensorflow_addons"),
    Alias("popdist", "popjit.popdist"),
)


def missing_module_message(fullname: str, target: str) -> str:
    """The text of the ImportError for a TensorFlow module popjit has no counterpart of: the reason and
    advice popjit/support.py's table gives for it (e.g. a module for several IPUs), or a generic one."""
    entry = lookup(graphcore_name(fullname))
    if entry is not None and entry.status is Status.MISSING:
        return f"No module named '{fullname}': {entry.message(graphcore_name(fullname))}"
    return (f"No module named '{fullname}': popjit does not provide {fullname}. Under `popjit run` the "
            f"tensorflow modules are popjit's (here {target}, which does not exist). docs/reference.md "
            "lists what popjit supports; if your program needs this module, please open an issue naming it.")


class TensorFlowFinder(AliasFinder):
    """Resolves the names in :data:`ALIASES` to popjit's modules; a name they cover that popjit
    lacks raises ``ModuleNotFoundError`` at once instead of falling through to a real TensorFlow."""

    def __init__(self, aliases: Sequence[Alias] = ALIASES) -> None:
        super().__init__("tensorflow", "popjit.tensorflow")
        self.aliases = sorted(aliases, key=lambda a: len(a.name), reverse=True)

    def target_of(self, fullname: str) -> str | None:
        """The popjit module behind ``fullname``, or None for a name this finder does not cover."""
        for alias in self.aliases:
            target = alias.resolve(fullname)
            if target is not None:
                return target
        return None

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> ModuleSpec | None:
        spec = super().find_spec(fullname, path, target)
        real = self.target_of(fullname)
        if spec is None and real is not None:
            raise ModuleNotFoundError(missing_module_message(fullname, real), name=fullname)
        return spec


def hook_installed() -> bool:
    """True if this process resolves ``tensorflow`` to popjit."""
    return any(isinstance(f, TensorFlowFinder) for f in sys.meta_path)


#: TensorFlow 1.15's ``import tensorflow``: the TF1 namespace (``tf.placeholder``, ``tf.Session``,
#: ``tf.train.GradientDescentOptimizer``), its submodules still TensorFlow 2's where TF1 has no own.
TF1_ALIASES: tuple[Alias, ...] = (Alias("tensorflow", "popjit.tensorflow.compat.v1", children="popjit.tensorflow"),
                                  *(a for a in ALIASES if a.name != "tensorflow"))

#: ``tf.<name>`` uses that only a TensorFlow 1 program makes (``import tensorflow as tf`` in TF 1.15).
TF1_ONLY_NAMES = frozenset({"placeholder", "Session", "InteractiveSession", "get_variable", "variable_scope",
                            "global_variables_initializer", "ConfigProto", "layers", "contrib", "losses",
                            "AUTO_REUSE", "assign", "assign_add", "trainable_variables", "get_default_graph"})


def tf1_program(path: str) -> bool:
    """Whether the script at ``path`` is a TensorFlow 1.15 program: it does ``import tensorflow as tf`` and
    uses ``tf.placeholder``, ``tf.Session``, ``tf.train.<Name>Optimizer`` or another TF1-only name."""
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return False
    names = {a.asname or a.name for node in ast.walk(tree) if isinstance(node, ast.Import)
             for a in node.names if a.name == "tensorflow"}
    return any(_tf1_use(node, names) for node in ast.walk(tree) if isinstance(node, ast.Attribute))


def _tf1_use(node: ast.Attribute, names: set[str]) -> bool:
    """``tf.placeholder``-like (a TF1-only name) or ``tf.train.<Name>Optimizer`` on a ``tensorflow`` alias."""
    owner = node.value
    if isinstance(owner, ast.Name):
        return owner.id in names and node.attr in TF1_ONLY_NAMES
    return (node.attr.endswith("Optimizer") and isinstance(owner, ast.Attribute) and owner.attr == "train"
            and isinstance(owner.value, ast.Name) and owner.value.id in names)


def install_hook(tf1: bool = False) -> TensorFlowFinder:
    """Make ``tensorflow`` and its relatives resolve to popjit in this process (idempotent); with ``tf1``,
    ``import tensorflow`` is TensorFlow 1's namespace (``tensorflow.compat.v1``)."""
    for finder in sys.meta_path:
        if isinstance(finder, TensorFlowFinder):
            return finder
    importlib.import_module("popjit.tensorflow.compat")  # so `tf.compat.v1` is an attribute too
    finder = TensorFlowFinder(TF1_ALIASES if tf1 else ALIASES)
    sys.meta_path.insert(0, finder)
    return finder


# -- tracebacks ------------------------------------------------------------------------------------


def _enter_user_code(start: Callable[[], Any]) -> None:
    """Call ``start``, which runs the user's program; tracebacks are cut just below this frame."""
    start()


def launched(tb: types.TracebackType | None) -> bool:
    """True if ``tb`` passes through :func:`_enter_user_code` (it comes from the user's program)."""
    while tb is not None and tb.tb_frame.f_code is not _enter_user_code.__code__:
        tb = tb.tb_next
    return tb is not None


def user_traceback(tb: types.TracebackType | None) -> types.TracebackType | None:
    """``tb`` from the user's first frame on, without popjit's launcher and import-hook frames.

    The frames up to :func:`_enter_user_code` go, and so does every frame of :mod:`runpy` or of
    this module after it (the launcher, and the finder raising "popjit does not provide ..."):
    what is left is the user's program, as python would show it, or None when the program never
    started (a SyntaxError in it, a package without ``__main__``). A traceback that does not
    pass through here is returned unchanged.
    """
    if not launched(tb):
        return tb
    while tb.tb_frame.f_code is not _enter_user_code.__code__:
        tb = tb.tb_next
    launchers = (vars(runpy), globals())
    kept = []
    entry = tb.tb_next
    while entry is not None:
        if not any(entry.tb_frame.f_globals is g for g in launchers):
            kept.append(entry)
        entry = entry.tb_next
    trimmed = None
    for e in reversed(kept):
        trimmed = types.TracebackType(trimmed, e.tb_frame, e.tb_lasti, e.tb_lineno)
    return trimmed


def install_excepthook() -> None:
    """Wrap ``sys.excepthook`` so uncaught exceptions print the user's traceback only.

    An error of the launch itself (no frame of the program ran, and it is not a SyntaxError or
    an interrupt) prints one line, ``popjit run: <message>``, as python does for its own.
    """
    previous = sys.excepthook
    if getattr(previous, "popjit_trims_tracebacks", False):
        return

    def excepthook(etype: type[BaseException], value: BaseException, tb: types.TracebackType | None) -> None:
        trimmed = user_traceback(tb)
        if launched(tb) and trimmed is None and not isinstance(value, SyntaxError | KeyboardInterrupt):
            print(f"popjit run: {value}", file=sys.stderr)
            return
        # The default hook prints value.__traceback__ when it is set, so trim that too.
        previous(etype, value.with_traceback(trimmed), trimmed)

    excepthook.popjit_trims_tracebacks = True  # type: ignore[attr-defined]
    sys.excepthook = excepthook


# -- running the program ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    """What to run: ``kind`` is "path", "module" or "code"; ``target`` the path, name or source;
    ``tf1``: run it as a TensorFlow 1.15 program (``--tf1``); ``verbose``: log popjit's compile phases (``-v``)."""

    kind: str
    target: str
    args: tuple[str, ...] = ()
    tf1: bool = False
    verbose: bool = False


def _set_path0(entry: str | None) -> None:
    """Replace the launcher's ``sys.path[0]`` with ``entry`` (drop it for None), as python would."""
    if sys.flags.safe_path:  # python -P / PYTHONSAFEPATH: the interpreter adds no such entry
        return
    if entry is None:
        del sys.path[0]
    else:
        sys.path[0] = entry


def _prepare(argv: list[str], path0: str | None) -> None:
    """Set up this process for the user's program: the import hook, tracebacks, argv, path."""
    install_hook()
    install_excepthook()
    sys.argv = argv
    _set_path0(path0)


def run_path(path: str, args: Sequence[str] = ()) -> None:
    """Run the file (or directory / zip with ``__main__.py``) at ``path`` as ``__main__``."""
    # Like python, sys.path[0] is the script's real directory; for a directory or zip, runpy
    # inserts the path itself. __file__ and code filenames are absolute, as in python >= 3.9
    # (runpy sets sys.argv[0] to the same absolute path).
    _prepare([path, *args], os.path.dirname(os.path.realpath(path)) if os.path.isfile(path) else None)
    _enter_user_code(functools.partial(runpy.run_path, os.path.abspath(path), run_name="__main__"))


def run_module(name: str, args: Sequence[str] = ()) -> None:
    """Run the module ``name`` as ``__main__``, as ``python -m name`` does (exit 1 if there is none)."""
    _prepare([name, *args], os.getcwd())  # runpy puts the module's file name in sys.argv[0]
    try:
        found = importlib.util.find_spec(name) is not None
        problem = "" if found else f"No module named {name}"
    except (ImportError, ValueError) as e:  # a missing parent package, or our finder's message
        problem = str(e)
    if problem:
        print(f"popjit run: {problem}", file=sys.stderr)
        raise SystemExit(1)
    _enter_user_code(functools.partial(runpy.run_module, name, run_name="__main__", alter_sys=True))


def run_code(source: str, args: Sequence[str] = ()) -> None:
    """Run ``source`` as ``__main__``, as ``python -c source`` does."""
    _prepare(["-c", *args], "")
    main = types.ModuleType("__main__")
    saved = sys.modules.get("__main__")
    sys.modules["__main__"] = main
    try:
        _enter_user_code(functools.partial(_exec_source, source, main.__dict__))
    finally:
        if saved is not None:
            sys.modules["__main__"] = saved


def _exec_source(source: str, namespace: dict[str, Any]) -> None:
    """Compile and run ``source`` under python's ``-c`` file name, ``<string>``."""
    filename = "<string>"
    # Registered with linecache so inspect (autograph, the traceback module) can read the source.
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    exec(compile(source, filename, "exec"), namespace)


# -- command line ----------------------------------------------------------------------------------


class UsageError(Exception):
    """A bad ``popjit run`` command line."""


VERBOSE = ("-v", "--verbose")
TF1 = "--tf1"


def parse_args(argv: Sequence[str]) -> Request | None:
    """``[-v] [SCRIPT | -m MODULE | -c CODE, ARGS...]`` → a :class:`Request`; None means ``--help``.

    Parsed as python parses its own command line: options only before the program, everything
    after it belongs to the program.
    """
    argv = list(argv)
    verbose = tf1 = False
    while argv and argv[0] in (*VERBOSE, TF1):
        verbose = verbose or argv[0] in VERBOSE
        tf1 = tf1 or argv[0] == TF1
        argv.pop(0)
    request = _parse_program(argv)
    return replace(request, verbose=verbose, tf1=tf1) if request is not None else request


def _parse_program(argv: Sequence[str]) -> Request | None:
    """The program to run and its arguments, after popjit's own options."""
    if not argv:
        raise UsageError("the following arguments are required: SCRIPT (or -m MODULE, or -c CODE)")
    head, rest = argv[0], list(argv[1:])
    if head in ("-h", "--help"):
        return None
    if head == "--":
        if not rest:
            raise UsageError("expected a script after --")
        return Request("path", rest[0], tuple(rest[1:]))
    for flag, kind in (("-m", "module"), ("-c", "code")):
        if head == flag:
            if not rest:
                raise UsageError(f"argument {flag}: expected one argument")
            return Request(kind, rest[0], tuple(rest[1:]))
        if head.startswith(flag):  # -mmodule, -c"code", as python allows
            return Request(kind, head[len(flag):], tuple(rest))
    if head.startswith("-"):
        raise UsageError(f"unrecognized option: {head}")
    return Request("path", head, tuple(rest))


def check(request: Request) -> str | None:
    """Why a script ``request`` cannot start (in python's words), or None."""
    if request.kind != "path":
        return None
    where = os.path.abspath(request.target)
    if not os.path.exists(where):
        return f"can't open file {where!r}: [Errno 2] No such file or directory"
    mains = (os.path.join(where, f"__main__.{ext}") for ext in ("py", "pyc"))
    if os.path.isdir(where) and not any(os.path.isfile(m) for m in mains):
        return f"can't find '__main__' module in {where!r}"
    return None


RUNNERS: dict[str, Callable[[str, Sequence[str]], None]] = {
    "path": run_path, "module": run_module, "code": run_code,
}


def seed_the_program() -> None:
    """``POPJIT_SEED=N``: the program starts as if its first line were ``tf.random.set_seed(N)``."""
    if config.SEED is not None:
        # why: the frontend loads only when POPJIT_SEED asks for it, so `popjit run` itself imports no
        # more of popjit than the program does
        from popjit.frontend.random_ops import set_seed

        set_seed(config.SEED)


def join_instances() -> str | None:
    """For one of several instances (started by poprun or mpiexec): connect to the others, so that a failure in
    any stops them all; why that cannot be done, or None."""
    install_excepthook()  # first: a failing instance's traceback is printed before the others are stopped
    try:
        instances.world().connect()
    except (ValueError, FailedPreconditionError) as e:
        return str(e)
    return None


def log_verbosely() -> None:
    """``-v``: the ``popjit`` logger's INFO messages (compile phases with their times, retracing reasons)
    go to stderr, each line stamped with the time."""
    config.configure_logging(logging.INFO)


def main(argv: Sequence[str]) -> int:
    """``popjit run ARGV``: 0 when the program ends normally; its exceptions and exits propagate."""
    try:
        request = parse_args(argv)
    except UsageError as e:
        print(f"{USAGE}\npopjit run: error: {e}", file=sys.stderr)
        return USAGE_ERROR
    if request is None:
        print(HELP, end="")
        return 0
    problem = check(request)
    if problem:
        print(f"popjit run: {problem}", file=sys.stderr)
        return USAGE_ERROR if problem.startswith("can't open") else 1
    if request.verbose:
        log_verbosely()
    if request.tf1 or (request.kind == "path" and os.path.isfile(request.target) and tf1_program(request.target)):
        logging.getLogger("popjit").info("Running %s as a TensorFlow 1 program: `import tensorflow` is "
                                         "tensorflow.compat.v1", request.target)
        install_hook(tf1=True)
    seed_the_program()
    problem = join_instances()
    if problem:
        print(f"popjit run: {problem}", file=sys.stderr)
        return 1
    try:
        RUNNERS[request.kind](request.target, request.args)
    except SystemExit as e:  # a failing sys.exit in one instance ends the others too
        status = instances.exit_status(e.code)
        instances.abort_on_failure(status, f"exit status {status}")
        raise
    return 0
