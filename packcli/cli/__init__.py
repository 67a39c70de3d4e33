"""The ``packcli`` command line: typer wiring only. Heavy modules are imported inside commands so ``--help`` is
instant. Every error becomes one ``error: ...`` line on stderr with exit 1 (data) or 2 (usage), mapped in one
place (:class:`OneLineErrors`); ``--debug`` anywhere on the command line shows the traceback instead.

Here: the app, the error mapper, the one signal handler and the entry point :func:`main`. ``flags`` holds the
option aliases commands share and their one builder of PackOptions, ``notices`` the warnings on stderr, ``pack`` the
pack command, ``inspect`` the commands that read (stats, verify, show, strategies), ``export`` the export
command.
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup

from packcli.cli import export, inspect, pack
from packcli.cli.closed_stdout import ReaderGone, end_by_sigpipe, reader_gone_raised, stderr_kept_open, stdout_named

__all__ = ["Command", "OneLineErrors", "app", "main"]

# click's exceptions, whether typer uses click itself or its vendored copy.
click_exceptions = sys.modules[typer.BadParameter.__module__]


def _untyped_flags(params: list[Any]) -> list[Any]:
    """A flag takes no value: no ``<bool>`` beside it in ``--help``."""
    for param in params:
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
    return params


class Command(TyperCommand):
    """A packcli command: its ``--help`` shows flags without a value type."""

    def get_params(self, ctx: Any) -> list[Any]:
        return _untyped_flags(super().get_params(ctx))


class OneLineErrors(TyperGroup):
    """The one error mapper: usage errors exit 2, packcli and OS errors and running out of memory exit 1, each as one
    ``error: ...`` line on stderr; anything unforeseen is one line too, with a hint. ``--debug`` (anywhere) lets the
    traceback through. The one signal handler is installed here (:mod:`packcli.util.signals`): SIGTERM and SIGHUP
    unwind the command's cleanups, then end it by the signal; Ctrl-C unwinds them, says what it left and exits 130.
    Standard output closed by its reader unwinds them too, then ends the command quietly by SIGPIPE
    (:mod:`packcli.cli.closed_stdout`). Bare ``packcli`` prints the help and exits 0."""

    def get_params(self, ctx: Any) -> list[Any]:
        return _untyped_flags(super().get_params(ctx))

    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        with reader_gone_raised():  # ``packcli --help``, ``--version``: printed while the command line is parsed
            return super().make_context(*args, **kwargs)

    def invoke(self, ctx: Any) -> Any:
        from packcli.errors import PackcliError

        try:
            with reader_gone_raised():  # the command's output, a command's ``--help``
                return super().invoke(ctx)
        except EOFError as exc:  # typer would print a blank line and lose the message ("aborted")
            raise PackcliError(str(exc) or "unexpected end of input") from None

    def main(self, args: Sequence[str] | None = None, *rest: Any, **kwargs: Any) -> Any:
        from packcli.errors import EXIT_DATA, PackcliError
        from packcli.util.signals import Interrupted, ending_by_signal

        arguments = list(sys.argv[1:] if args is None else args)
        debug = "--debug" in arguments
        arguments = [argument for argument in arguments if argument != "--debug"]
        kwargs["standalone_mode"] = False
        stderr_kept_open()
        if sys.stdout is None:  # ``>&-``: Python has no standard output, and the next file opened would take its place
            _fail("standard output is closed (>&-): redirect it to a file or /dev/null instead", EXIT_DATA)
        try:
            with ending_by_signal(), reader_gone_raised(), stdout_named():  # SIGTERM/SIGHUP unwind every cleanup first
                try:
                    code = super().main(arguments, *rest, **kwargs)
                except click_exceptions.NoArgsIsHelpError as exc:
                    shown = exc.format_message()  # the help, made as the error was: empty where typer's rich printed it
                    if shown:
                        print(shown)
                    code = 0
                sys.stdout.flush()  # what print left buffered meets a closed reader here, not in the interpreter's exit
        except ReaderGone:
            end_by_sigpipe()
        except click_exceptions.UsageError as exc:
            command = exc.ctx.command_path if exc.ctx else "packcli"
            _fail(f"{exc.format_message()} (see '{command} --help')", 2)
        except Interrupted as exc:
            _fail(str(exc), 130)
        except typer.Abort:
            _fail("aborted", EXIT_DATA)
        except (PackcliError, OSError) as exc:
            if debug:
                raise
            _fail(str(exc), exc.exit_code if isinstance(exc, PackcliError) else EXIT_DATA)
        except MemoryError as exc:  # the system gave less than the run needed (a ulimit, a container, other programs)
            if debug:
                raise
            _fail(
                f"out of memory ({exc or 'an allocation failed'}); give the command more memory, or less to do (fewer "
                "--target-tokens; --partitions for a large corpus)",
                EXIT_DATA,
            )
        except Exception as exc:  # a bug or an unforeseen library error: still one line, exit 1
            if debug:
                raise
            _fail(f"unexpected {type(exc).__name__}: {exc} (rerun with --debug for the traceback)", EXIT_DATA)
        sys.exit(code if isinstance(code, int) else 0)


def _fail(message: str, code: int) -> None:
    from packcli.errors import one_line

    print(f"error: {one_line(message)}", file=sys.stderr)
    sys.exit(code)


app = typer.Typer(
    cls=OneLineErrors,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    help="Tokenize a corpus and pack whole documents into fixed-length training sequences (Arrow shards). "
    "Errors are one line; --debug anywhere on the command line shows the traceback.",
)


def _print_version(value: bool) -> None:
    if value:
        from packcli.version import __version__

        print(f"packcli {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool, typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Options that come before the command."""


# Registered in this order, the order ``packcli --help`` lists them in.
app.command(cls=Command)(pack.pack)
app.command(cls=Command)(inspect.strategies)
app.command(cls=Command)(inspect.stats)
app.command(cls=Command)(inspect.verify)
app.command(cls=Command)(inspect.show)
app.command(cls=Command)(export.export)


def main() -> None:
    """Console entry point."""
    if _is_the_program():
        pack.as_own_command()
        # packcli does no linear algebra, and numpy's OpenBLAS starts a thread per core as numpy is imported: 0.05 s
        # of every run's start on 2 cores (``python -c "import numpy"``: 0.12 s, 0.06 s so). The user's value stands.
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    try:
        app()
    finally:
        # The process ends here, every output closed: frozen, the heap is left out of the interpreter's collections
        # at exit, which would only walk every object (50-70 ms with typer, pydantic, numpy and pyarrow loaded).
        gc.freeze()


def _is_the_program() -> bool:
    """Whether packcli is this process' program (the ``packcli`` command, ``python -m packcli``), not a function a
    caller's script called: only then are every thread and tokenizer pool in it packcli's."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return (spec is not None and spec.name == "packcli.__main__") or Path(sys.argv[0]).name == "packcli"
