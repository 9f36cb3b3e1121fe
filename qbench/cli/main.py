"""The ``qbench`` command line: the parser, the dispatch to one module per command
(``cli/<command>.py``: its ``add_parser`` and ``run``), logging, Ctrl-C and exit codes."""

import argparse
import logging
import os
import sys
import textwrap
import traceback

from ..core.errors import QBenchError
from . import baseline, build, diagnose, layers, models, run, sweep, tune
from .exits import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_PASS, EXIT_USAGE
from .interrupts import INTERRUPTS

DESCRIPTION = """\
Quantize a PyTorch vision model to INT8 with Apache TVM (Relax), then check that the INT8
build is faster and still agrees with the PyTorch model; leaves report.md, report.json and
report.html for sign-off. Example:

  qbench run --model efficientnet_lite0 --target llvm"""

EPILOG = """\
exit codes:
  0    success; for run: sign-off PASS (sweep: every cell PASSes); for compare: no
       regression
  1    sign-off FAIL (run; sweep: see `qbench sweep --help`); a regression (compare)
  2    usage or input error (one line names the problem and the valid choices)
  3    internal error (a bug in qbench or TVM; the traceback is printed)
  4    compare: no comparable baseline (none stored for the machine, model and
       target, or its run definition differs: "not comparable")
  130  interrupted (Ctrl-C or SIGTERM)

Progress goes to stderr, one line per stage ("[qbench] import to Relax: 12.3 s");
-v adds details. 'qbench COMMAND --help' lists a command's options."""

COMMANDS = {
    "run": run.run,
    "tune": tune.run,
    "build": build.run,
    "diagnose": diagnose.run,
    "sweep": sweep.run,
    "layers": layers.run,
    "models": models.run,
    "baseline": baseline.run_baseline,
    "compare": baseline.run_compare,
    "history": baseline.run_history,
}


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line naming the problem (argparse's own
    message, with the valid choices where it has them) and a pointer to ``--help``, exit 2;
    argparse's default prints the whole usage first."""

    def error(self, message, prog=None):
        prog = prog or self.prog
        self.exit(2, f"{prog}: error: {message} (see '{prog} --help')\n")

    def parse_args(self, args=None, namespace=None):
        """argparse's, with unknown options named against the command that refuses them."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            command = getattr(parsed, "command", None)
            prog = f"{self.prog} {command}" if command else self.prog
            self.error(f"unrecognized arguments: {' '.join(extras)}", prog)
        return parsed


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the description's line breaks and appends each option's default.

    ``(default: X)`` is appended where the help text does not state one, ``(required)`` to
    required options; flags say ``(default: off)``; options without a default say nothing
    more (their help says what happens without them).
    """

    def _get_help_string(self, action):
        text = action.help or ""
        if action.required and action.option_strings:
            return f"{text} (required)"
        if "default" in text or action.default in (None, argparse.SUPPRESS):
            return text
        if action.nargs == 0 and action.default is False:
            return f"{text} (default: off)"
        return f"{text} (default: %(default)s)"


def _parser():
    from .. import __version__

    p = _Parser(
        allow_abbrev=False,
        prog="qbench",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=_HelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"qbench {__version__}")
    sub = p.add_subparsers(dest="command", required=True, title="commands", metavar="COMMAND")

    def command(name, text):
        return sub.add_parser(
            name,
            allow_abbrev=False,
            help=text,
            description=textwrap.fill(text, 80),
            formatter_class=_HelpFormatter,
        )

    for module in (run, tune, build, diagnose, sweep, layers, baseline, models):
        module.add_parser(command)
    return p


class _StderrHandler(logging.StreamHandler):
    """A log handler that writes to whatever ``sys.stderr`` is at the time of each message
    (a plain ``StreamHandler`` keeps the stream it was made with, which tests and embedding
    tools replace)."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value):
        pass


def _set_verbosity(verbose):
    """Warnings of every logger on stderr; INFO for qbench's own loggers with ``-v``."""
    root = logging.getLogger()
    if not any(isinstance(h, _StderrHandler) for h in root.handlers):
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)
    root.setLevel(min(root.level or logging.WARNING, logging.WARNING))
    logging.getLogger("qbench").setLevel(logging.INFO if verbose else logging.WARNING)


def main(argv=None):
    """Run one ``qbench`` command; return its exit code (see ``EPILOG``)."""
    from ..core.progress import give_bars_a_width

    give_bars_a_width()
    args = _parser().parse_args(argv)
    _set_verbosity(getattr(args, "verbose", False))
    with INTERRUPTS:
        return _dispatch(args)


def entry():
    """The ``qbench`` console command: ``main()``, then the process ends at once.

    Python's normal exit joins TVM's thread pool workers, and a worker first finishes its
    spin-wait (300000 ``sched_yield`` calls at TVM 0.27's default spin count; a kill signal
    does not cut it short). With another process busy on the worker's core each yield gives
    the core away for a time slice: a run with a busy loop on one of the two Zen 3 cores had
    written its report and then had not exited after 3 minutes. Output is flushed and
    logging shut down first; every report and cache is already written (atomically).
    """
    code = main()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except OSError:  # a reader that closed the pipe early: nothing more can reach it
            pass
    os._exit(code)


def _dispatch(args):
    """Run the parsed command and map its outcome to an exit code."""
    try:
        return COMMANDS[args.command](args)
    except QBenchError as e:
        print(f"qbench: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("qbench: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # the reader stopped early (`qbench models | head`): not a bug
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_PASS
    except Exception:  # noqa: BLE001 - a bug, not a verdict: keep it apart from exit code 1
        if INTERRUPTS.count:  # TVM turned the KeyboardInterrupt into its own error
            print("qbench: interrupted", file=sys.stderr)
            return EXIT_INTERRUPTED
        traceback.print_exc()
        print(
            "qbench: internal error (a bug in qbench or TVM; see the traceback above)",
            file=sys.stderr,
        )
        return EXIT_INTERNAL
