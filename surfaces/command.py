"""What every `pricewatch` command shares: the typer app, one line per error (bad input exits
2, a service that failed exits 1), the client, and `--json`'s printing."""

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from functools import wraps
from importlib.metadata import version
from typing import Annotated, Any, ParamSpec

import typer
from typer.core import TyperOption

from client.pricewatch import (
    Pricewatch,
)
from pricewatch import views
from pricewatch.models import (
    CheckResult,
)
from pricewatch.settings import Settings
from surfaces import terminal
from surfaces.errors import Fault, failure


def _flag_type(option: TyperOption, ctx: Any) -> str | None:
    """A flag takes no value: no `<bool>` beside it in `--help` (typer's rich help prints the
    type of every option, flags too, where its plain help prints none for them)."""
    return None if option.is_flag or option.count else _option_type(option, ctx)


_option_type = TyperOption.display_type_rich
TyperOption.display_type_rich = _flag_type  # type: ignore[method-assign, assignment]

app = typer.Typer(
    help="Watch pages on a schedule; record one result per due slot; say when they change.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)

P = ParamSpec("P")


def print_version(asked: bool) -> None:
    if asked:
        typer.echo(f"pricewatch {version('pricewatch')}")
        raise typer.Exit()


@app.callback()
def main_options(
    show_version: Annotated[
        bool,
        typer.Option("--version", callback=print_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    """Watch pages on a schedule; record one result per due slot; say when they change."""


BAD_INPUT = 2
DASHBOARD_PORT = 8090
UNAVAILABLE = 1


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Turn expected failures into one line on stderr: bad input exits 2, an unreachable
    or failing service, or a check not final in time, exits 1."""
    try:
        yield
    except BrokenPipeError:
        # The reader left (`pricewatch failures | head`): click ends quietly (status 1).
        raise
    except Exception as err:
        said = failure(err)
        if said is None:
            raise
        fail(said.line, BAD_INPUT if said.fault in (Fault.INPUT, Fault.UNKNOWN) else UNAVAILABLE)


def command(fn: Callable[P, Coroutine[Any, Any, None]]) -> Callable[P, None]:
    """Run an async command with `user_errors`."""

    @wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> None:
        with user_errors():
            asyncio.run(fn(*args, **kwargs))

    return run


def fail(message: str, code: int) -> None:
    typer.echo(terminal.inert(f"pricewatch: {message}"), err=True)
    raise typer.Exit(code)


def settings() -> Settings:
    return Settings()


@contextlib.asynccontextmanager
async def pricewatch() -> AsyncIterator[Pricewatch]:
    async with Pricewatch(settings()) as client:
        yield client


def print_result(result: CheckResult) -> None:
    typer.echo(terminal.check(result))


def print_json(command: str, value: object) -> None:
    typer.echo(views.dump(command, value))
