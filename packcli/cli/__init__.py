"""The ``packcli`` command line: typer wiring only. Heavy modules are imported inside commands so ``--help`` is
instant. Every error becomes one ``error: ...`` line on stderr with exit 1 (data) or 2 (usage), mapped in one
place (:class:`OneLineErrors`); ``--debug`` anywhere on the command line shows the traceback instead.

Here: the app, the error mapper and the entry point :func:`main`. ``flags`` holds the option aliases commands
share, ``notices`` the warnings on stderr, ``pack`` the pack command, ``report`` stats, verify, show and strategies,
``export`` the export command.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Sequence
from typing import Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup

from packcli.cli import export, pack, report

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
    """The one error mapper: usage errors exit 2, packcli and OS errors exit 1, each as one ``error: ...`` line on
    stderr; anything unforeseen is one line too, with a hint. ``--debug`` (anywhere) lets the traceback through.
    SIGTERM and SIGHUP unwind the command's cleanups, then end it by the signal. Bare ``packcli`` prints the help
    and exits 0."""

    def get_params(self, ctx: Any) -> list[Any]:
        return _untyped_flags(super().get_params(ctx))

    def main(self, args: Sequence[str] | None = None, *rest: Any, **kwargs: Any) -> Any:
        from packcli.errors import EXIT_DATA, PackcliError, ending_by_signal

        arguments = list(sys.argv[1:] if args is None else args)
        debug = "--debug" in arguments
        arguments = [argument for argument in arguments if argument != "--debug"]
        kwargs["standalone_mode"] = False
        try:
            with ending_by_signal():  # SIGTERM/SIGHUP unwind every cleanup first
                code = super().main(arguments, *rest, **kwargs)
        except click_exceptions.NoArgsIsHelpError as exc:
            print(exc.ctx.get_help() if exc.ctx else exc.format_message())
            sys.exit(0)
        except click_exceptions.UsageError as exc:
            command = exc.ctx.command_path if exc.ctx else "packcli"
            _fail(f"{exc.format_message()} (see '{command} --help')", 2)
        except typer.Abort:
            _fail("aborted", EXIT_DATA)
        except KeyboardInterrupt:
            _fail("interrupted; no output was written", 130)
        except (PackcliError, OSError) as exc:
            if debug:
                raise
            _fail(str(exc), exc.exit_code if isinstance(exc, PackcliError) else EXIT_DATA)
        except Exception as exc:  # a bug or an unforeseen library error: still one line, exit 1
            if debug:
                raise
            _fail(f"unexpected {type(exc).__name__}: {exc} (rerun with --debug for the traceback)", EXIT_DATA)
        sys.exit(code if isinstance(code, int) else 0)


def _fail(message: str, code: int) -> None:
    print(f"error: {message}", file=sys.stderr)
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
        from packcli import __version__

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
app.command(cls=Command)(report.strategies)
app.command(cls=Command)(report.stats)
app.command(cls=Command)(report.verify)
app.command(cls=Command)(report.show)
app.command(cls=Command)(export.export)


def main() -> None:
    """Console entry point."""
    try:
        app()
    finally:
        # The process ends here, every output closed: frozen, the heap is left out of the interpreter's collections
        # at exit, which would only walk every object (50-70 ms with typer, pydantic, numpy and pyarrow loaded).
        gc.freeze()
