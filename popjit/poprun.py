"""``popjit poprun`` (also installed as ``poprun``): run a program as several instances, through MPI, as
Graphcore's ``poprun`` does; each instance runs its share of the replicas under ``popjit run``.

    poprun --num-instances 2 --num-replicas 4 python train.py --epochs 3
    popjit poprun --num-instances 2 --num-replicas 4 train.py --epochs 3

The program is ``python ARGS`` (any ``python``, ``python3``...: the instances run in this Python, where
popjit is installed), a ``.py`` script, or another executable, run as it is. poprun checks the options,
then starts ``mpiexec`` (MPICH's, from the ``mpich`` wheel: ``pip install 'popjit[distributed]'``) with
``--num-instances`` processes, each a small relay (``python -m popjit.poprun``, :func:`relay_main`) that
starts the instance itself as ``python -m popjit run ARGS`` and forwards its output. The instances find
their place in the environment, Graphcore's names (:data:`popjit.popdist.ENV`):
``POPDIST_NUM_TOTAL_REPLICAS``, ``POPDIST_NUM_LOCAL_REPLICAS`` (replicas / instances),
``POPDIST_NUM_IPUS_PER_REPLICA``, ``POPDIST_REPLICA_INDEX_OFFSET``, ``POPDIST_LOCAL_INSTANCE_INDEX``,
``POPDIST_UNIFORM_REPLICAS_PER_INSTANCE``, and popjit's ``POPDIST_NUM_INSTANCES``/``POPDIST_INSTANCE_INDEX``.

Every line an instance writes is prefixed as poprun's ``mpirun --tag-output`` does: ``[1,I]<stdout>:`` or
``[1,I]<stderr>:`` for instance ``I``. When an instance fails (an uncaught exception, a non-zero exit, a
signal) the relay forwards the rest of its output, says how it ended, and exits, which makes ``mpiexec``
stop every other instance at once; poprun then says which instance failed first and exits with its status
(128 + N for a signal N, as a shell reports it).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from popjit import popdist
from popjit.runtime import instances

USAGE_ERROR = 2
INSTALL = "pip install 'popjit[distributed]'"

#: Graphcore's poprun options popjit has no use for, and why.
_VIPU = "popjit's virtual IPUs need no V-IPU server or partition"
UNSUPPORTED = {
    **{name: _VIPU for name in ("--vipu-server-host", "--vipu-server-port", "--vipu-server-timeout",
                                "--vipu-partition", "--vipu-partition-attempts", "--update-partition",
                                "--reset-partition", "--remove-partition", "--vipu-cluster", "--vipu-allocation",
                                "--num-ilds")},
    "--numa-aware": "popjit does not bind instances to NUMA nodes",
    "--host-file": "give the hosts with --host",
    "--import-config": "poprun's configuration files are not read; give the options on the command line",
    "--export-config": "poprun's configuration files are not written",
}
#: Options that take a yes/no value (``--print-topology yes``, ``--print-topology=1``; alone means yes).
BOOLEAN = ("--print-topology", "--offline-mode")
_TRUE, _FALSE = ("1", "yes", "true", "on"), ("0", "no", "false", "off")


class UsageError(Exception):
    """A bad poprun command line."""


@dataclass(frozen=True)
class Launch:
    """What to start: the options, checked, and the program."""

    num_instances: int
    num_replicas: int
    ipus_per_replica: int
    hosts: tuple[str, ...]
    mpi_global_args: tuple[str, ...]
    mpi_local_args: tuple[str, ...]
    print_topology: bool
    only_output_from_instance: int | None
    executable_cache_path: str | None
    verbose: bool
    program: tuple[str, ...]

    @property
    def local_replicas(self) -> int:
        """Replicas per instance."""
        return self.num_replicas // self.num_instances


# -- the command line ----------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)


def build_parser(prog: str = "poprun") -> argparse.ArgumentParser:
    """poprun's options (the program and its arguments are split off first, see :func:`split_program`)."""
    p = _Parser(prog=prog, usage=f"{prog} [options] PROGRAM [ARGS ...]", add_help=False,
                description="Run an IPU TensorFlow program as several instances through MPI (as Graphcore's poprun).",
                epilog="PROGRAM is `python SCRIPT ARGS` (run under `popjit run`), a .py script, or any executable. "
                       "Each instance's output lines start with [1,INDEX]<stdout>: or [1,INDEX]<stderr>:.")
    p.add_argument("-h", "--help", action="store_true", help="show this help and exit")
    p.add_argument("--num-instances", type=int, default=1, help="the number of instances (default 1)")
    p.add_argument("--num-replicas", type=int, default=1,
                   help="the total number of replicas, divided evenly among the instances (default 1)")
    p.add_argument("--ipus-per-replica", type=int, default=1, help="the number of IPUs per replica (default 1)")
    p.add_argument("-H", "--host", default="", help="comma-separated hosts to run the instances on, divided "
                                                    "evenly (mpiexec starts them over ssh)")
    p.add_argument("--mpi-global-args", default="", help="options for mpiexec (MPICH's Hydra), e.g. '-launcher ssh'")
    p.add_argument("--mpi-local-args", default="", help="options for mpiexec placed just before the program")
    p.add_argument("--print-topology", default="no", help="yes: print the hosts, instances and replicas first")
    p.add_argument("--only-output-from-instance", type=int, default=None,
                   help="show only this instance's output (hides the others' errors too)")
    p.add_argument("--executable-cache-path", default=None,
                   help="keep compiled programs here (adds --executable_cache_path to TF_POPLAR_FLAGS)")
    p.add_argument("--offline-mode", default="no", help="accepted: popjit never attaches real IPUs")
    p.add_argument("-v", "--verbose", action="store_true", help="print the mpiexec command line")
    for name in UNSUPPORTED:
        p.add_argument(name, default=None, help=argparse.SUPPRESS)
    return p


def _takes_value(parser: argparse.ArgumentParser, option: str) -> bool:
    action = parser._option_string_actions.get(option)
    return action is not None and action.nargs != 0


def split_program(parser: argparse.ArgumentParser, argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """``argv`` split into poprun's options and the program with its arguments (from the first word that is
    neither an option nor an option's value; ``--`` ends the options too). A yes/no option without a value
    is given ``yes``."""
    options: list[str] = []
    i = 0
    while i < len(argv):
        word = argv[i]
        if word == "--":
            return options, list(argv[i + 1:])
        if not word.startswith("-") or word == "-":
            break
        if "=" in word or not _takes_value(parser, word):
            options.append(word)
        elif word in BOOLEAN:
            given = i + 1 < len(argv) and argv[i + 1].lower() in (*_TRUE, *_FALSE)
            options.append(f"{word}={argv[i + 1] if given else 'yes'}")
            i += given
        else:
            options += argv[i:i + 2]
            i += 1
        i += 1
    return options, list(argv[i:])


def _yes(name: str, value: str) -> bool:
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    raise UsageError(f"{name}: expected yes or no, not {value!r}")


def parse(argv: Sequence[str], prog: str = "poprun") -> Launch | None:
    """The :class:`Launch` ``argv`` asks for (None for ``--help``); :class:`UsageError` for a bad one."""
    parser = build_parser(prog)
    options, program = split_program(parser, argv)
    args = parser.parse_args(options)
    if args.help:
        return None
    for name, why in UNSUPPORTED.items():
        if getattr(args, name.lstrip("-").replace("-", "_")) is not None:
            raise UsageError(f"{name} is not supported by popjit: {why}")
    if not program:
        raise UsageError("the following arguments are required: PROGRAM")
    launch = Launch(
        num_instances=args.num_instances, num_replicas=args.num_replicas, ipus_per_replica=args.ipus_per_replica,
        hosts=tuple(h for h in args.host.split(",") if h), mpi_global_args=tuple(shlex.split(args.mpi_global_args)),
        mpi_local_args=tuple(shlex.split(args.mpi_local_args)),
        print_topology=_yes("--print-topology", args.print_topology),
        only_output_from_instance=args.only_output_from_instance, executable_cache_path=args.executable_cache_path,
        verbose=args.verbose, program=tuple(program))
    _yes("--offline-mode", args.offline_mode)
    check(launch)
    return launch


def check(launch: Launch) -> None:
    """The checks poprun makes before starting anything."""
    for name, value in (("--num-instances", launch.num_instances), ("--num-replicas", launch.num_replicas),
                        ("--ipus-per-replica", launch.ipus_per_replica)):
        if value < 1:
            raise UsageError(f"{name} must be at least 1, not {value}")
    if launch.num_replicas % launch.num_instances:
        raise UsageError(f"--num-replicas ({launch.num_replicas}) must be a multiple of --num-instances "
                         f"({launch.num_instances}): the replicas are divided evenly among the instances")
    if launch.hosts and launch.num_instances % len(launch.hosts):
        raise UsageError(f"--num-instances ({launch.num_instances}) must be a multiple of the number of hosts "
                         f"({len(launch.hosts)}): the instances are divided evenly among the hosts")
    only = launch.only_output_from_instance
    if only is not None and not 0 <= only < launch.num_instances:
        raise UsageError(f"--only-output-from-instance {only} is not an instance (0 to {launch.num_instances - 1})")


# -- starting the instances ----------------------------------------------------------------------------


def find_mpiexec() -> str:
    """MPICH's ``mpiexec`` from the ``mpich`` wheel beside this Python, else one on PATH."""
    scripts = Path(sys.executable).parent
    for candidate in (Path(sys.prefix) / "bin" / "mpiexec", scripts / "mpiexec"):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("mpiexec") or shutil.which("mpirun")
    if found is None:
        raise UsageError(f"no MPI launcher (mpiexec) found beside {sys.executable} or on PATH: {INSTALL} installs "
                         "MPICH and mpi4py")
    return found


def instance_command(program: Sequence[str]) -> list[str]:
    """How each instance runs ``program``: ``python ARGS`` and ``SCRIPT.py ARGS`` under ``popjit run`` (in this
    Python), anything else as it is."""
    head = os.path.basename(program[0])
    if re.fullmatch(r"python[\d.]*", head) or program[0] == sys.executable:
        return [sys.executable, "-m", "popjit", "run", *program[1:]]
    if program[0].endswith(".py"):
        return [sys.executable, "-m", "popjit", "run", *program]
    return list(program)


def instance_environment(launch: Launch, environ: dict[str, str]) -> dict[str, str]:
    """The environment every instance starts with (the per-instance variables are the relay's)."""
    env = dict(environ)
    env.update({instances.NUM_INSTANCES_ENV: str(launch.num_instances),
                popdist.TOTAL_REPLICAS_ENV: str(launch.num_replicas),
                popdist.LOCAL_REPLICAS_ENV: str(launch.local_replicas),
                popdist.IPUS_PER_REPLICA_ENV: str(launch.ipus_per_replica),
                popdist.UNIFORM_REPLICAS_ENV: "1"})
    for name in (instances.INSTANCE_INDEX_ENV, popdist.REPLICA_INDEX_OFFSET_ENV, popdist.LOCAL_INSTANCE_INDEX_ENV,
                 instances.RELAYED_ENV):
        env.pop(name, None)  # each instance's own, set by its relay
    if launch.executable_cache_path:
        flag = f"--executable_cache_path={launch.executable_cache_path}"
        env["TF_POPLAR_FLAGS"] = f"{env.get('TF_POPLAR_FLAGS', '')} {flag}".strip()
    return env


def mpiexec_command(launch: Launch, mpiexec: str, status_dir: str) -> list[str]:
    """The ``mpiexec`` command line that starts one relay per instance."""
    cmd = [mpiexec, *launch.mpi_global_args, "-n", str(launch.num_instances)]
    if launch.hosts:
        per_host = launch.num_instances // len(launch.hosts)
        cmd += ["-hosts", ",".join(f"{h}:{per_host}" for h in launch.hosts)]
    relay = [sys.executable, "-m", "popjit.poprun", "--status-dir", status_dir]
    if launch.only_output_from_instance is not None:
        relay += ["--only-output-from-instance", str(launch.only_output_from_instance)]
    return [*cmd, *launch.mpi_local_args, *relay, "--", *instance_command(launch.program)]


def topology(launch: Launch) -> str:
    """poprun's topology table: the hosts, the instances on each, the replicas of each."""
    width = max(len(str(launch.num_replicas - 1)), 2) + 2
    hosts = launch.hosts or ("localhost",)
    per_host = launch.num_instances // len(hosts)

    def row(name: str, cells: Sequence[str], span: int) -> str:
        cell = span * (width + 1) - 1
        return f"| {name:<9} |" + "|".join(c.center(cell) for c in cells) + "|"

    rows = [row("hosts", hosts, per_host * launch.local_replicas),
            row("instances", [str(i) for i in range(launch.num_instances)], launch.local_replicas),
            row("replicas", [str(r) for r in range(launch.num_replicas)], 1)]
    inner = len(rows[0]) - 2
    rule = "|" + "-" * 11 + "|" + "-" * (inner - 12) + "|"
    return "\n".join([" " + "=" * inner, "|" + "poprun topology".center(inner) + "|", "|" + "=" * inner + "|",
                      rows[0], rule, rows[1], rule, rows[2], " " + "-" * inner])


@dataclass(frozen=True)
class Failure:
    """How one instance ended, as its relay recorded it."""

    index: int
    status: int
    what: str
    time: float


def failures(status_dir: str) -> list[Failure]:
    """The failures the relays recorded, earliest first."""
    out = []
    for path in Path(status_dir).glob("instance-*.json"):
        try:
            out.append(Failure(**json.loads(path.read_text())))
        except (OSError, ValueError, TypeError):  # a record half written when its relay was stopped
            continue
    return sorted(out, key=lambda f: f.time)


def launch_instances(launch: Launch, prog: str = "poprun") -> int:
    """Start the instances and wait for them; the exit status of the first that failed (0 if none did)."""
    if launch.print_topology:
        print(topology(launch), flush=True)
    mpiexec = find_mpiexec()
    status_dir = tempfile.mkdtemp(prefix="poprun-")
    try:
        cmd = mpiexec_command(launch, mpiexec, status_dir)
        if launch.verbose:
            print(f"{prog}: running {shlex.join(cmd)}", file=sys.stderr, flush=True)
        status = _wait(subprocess.Popen(cmd, env=instance_environment(launch, dict(os.environ))))
        return _outcome(launch, status, failures(status_dir), prog)
    finally:
        shutil.rmtree(status_dir, ignore_errors=True)


def _wait(process: subprocess.Popen) -> int:
    """``process``'s exit status; Ctrl-C goes to the instances (they share the terminal), so wait on."""
    while True:
        try:
            return process.wait()
        except KeyboardInterrupt:
            continue


def _outcome(launch: Launch, status: int, failed: list[Failure], prog: str) -> int:
    """The exit status of the whole run, saying which instance failed first if one did."""
    if failed:
        first = failed[0]
        others = "; the other instances were stopped" if launch.num_instances > 1 else ""
        print(f"{prog}: instance {first.index} failed first: {first.what}{others}; exit status {first.status}",
              file=sys.stderr)
        return first.status
    if status != 0:
        print(f"{prog}: mpiexec exited with status {status}", file=sys.stderr)
    return status


def main(argv: Sequence[str] | None = None, prog: str = "poprun") -> int:
    """Entry point of ``poprun`` and ``popjit poprun``; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        launch = parse(argv, prog)
        if launch is None:
            build_parser(prog).print_help()
            return 0
        return launch_instances(launch, prog)
    except UsageError as e:
        print(f"usage: {prog} [options] PROGRAM [ARGS ...]\n{prog}: error: {e}", file=sys.stderr)
        return USAGE_ERROR


# -- each instance's relay -----------------------------------------------------------------------------


def _die_with_parent() -> None:
    """In the instance, before it runs: end it when its relay ends, however the relay ends (Linux)."""
    if sys.platform.startswith("linux"):
        import ctypes  # why: only the child, only here

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data):]


def _relay(source: IO[bytes], fd: int, prefix: bytes, quiet: bool) -> None:
    """Copy ``source`` to ``fd`` line by line, each line after ``prefix`` (or drop it all when ``quiet``)."""
    pending = b""
    while chunk := os.read(source.fileno(), 1 << 16):
        if quiet:
            continue
        *lines, pending = (pending + chunk).split(b"\n")
        if lines:
            _write_all(fd, b"".join(prefix + line + b"\n" for line in lines))
    if pending and not quiet:
        _write_all(fd, prefix + pending + b"\n")


def _record(status_dir: str, failure: Failure) -> None:
    """Leave ``failure`` where poprun looks (best effort: on another host the directory does not exist)."""
    path = Path(status_dir) / f"instance-{failure.index}.json"
    try:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(failure.__dict__))
        tmp.replace(path)
    except OSError:
        pass


def _ended(code: int) -> tuple[int, str]:
    """A child's return code as an exit status and words."""
    if code >= 0:
        return code, f"exit status {code}"
    name = signal.Signals(-code).name if -code in signal.valid_signals() else "?"
    return 128 - code, f"killed by signal {-code} ({name})"


def relay_main(argv: Sequence[str]) -> int:
    """``python -m popjit.poprun --status-dir DIR [--only-output-from-instance I] -- COMMAND...``: what
    mpiexec starts for each instance. It runs COMMAND with the instance's own variables, forwards its output
    with the instance's prefix, records a failure in DIR for poprun, and exits with the instance's status."""
    p = argparse.ArgumentParser(prog="python -m popjit.poprun")
    p.add_argument("--status-dir", required=True)
    p.add_argument("--only-output-from-instance", type=int, default=None)
    p.add_argument("command", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    _, index = instances.placement()
    env = dict(os.environ)
    env.update({instances.INSTANCE_INDEX_ENV: str(index),
                popdist.REPLICA_INDEX_OFFSET_ENV: str(index * int(env.get(popdist.LOCAL_REPLICAS_ENV, "1"))),
                popdist.LOCAL_INSTANCE_INDEX_ENV: str(instances.local_placement()[1]),
                instances.RELAYED_ENV: "1"})
    try:
        # close_fds=False passes on the descriptors MPI's launcher gave this process (PMI_FD), as if the launcher
        # had started the instance itself; in a process group of its own, the instance gets each signal the
        # launcher sends this relay's group once, from the relay
        child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, close_fds=False,
                                 preexec_fn=_die_with_parent, process_group=0)
    except OSError as e:
        _write_all(2, f"[1,{index}]<stderr>:poprun: cannot start {shlex.join(command)}: {e.strerror}\n".encode())
        _record(args.status_dir, Failure(index, 127, f"cannot start {command[0]}", time.time()))
        return 127
    quiet = args.only_output_from_instance not in (None, index)
    relays = [threading.Thread(target=_relay, args=(stream, fd, f"[1,{index}]<{name}>:".encode(), quiet))
              for stream, fd, name in ((child.stdout, 1, "stdout"), (child.stderr, 2, "stderr"))]
    for t in relays:
        t.start()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, frame: child.send_signal(signum))
    code = child.wait()
    for t in relays:
        t.join()
    status, what = _ended(code)
    if status != 0:
        if code < 0 and not quiet:
            _write_all(2, f"[1,{index}]<stderr>:poprun: instance {index} was {what}\n".encode())
        _record(args.status_dir, Failure(index, status, what, time.time()))
    return status


if __name__ == "__main__":
    raise SystemExit(relay_main(sys.argv[1:]))
