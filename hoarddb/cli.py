"""The ``hoarddb`` and ``hoardDB`` commands.

    hoarddb shell --data DIR [--json] [-f FILE | -e STATEMENT] [--continue-on-error]
        the HQL shell on an embedded database: interactive on a terminal, else a script
        from standard input, from FILE, or the one STATEMENT
    hoarddb tour --data DIR
        a guided walk through the six store types, on a database in DIR
    hoardDB [same options as hoarddb shell] [-insecure] [--host HOST] [--port PORT]
        the same shell; -insecure, --host and --port will reach a server (not yet)

Exit status: 0 when every statement succeeded, 1 when one failed (or the data
directory could not be opened), 2 for a usage error. An interactive session exits 0:
its errors are shown as they happen.
"""

from __future__ import annotations

import sys

import click

from . import __version__
from .errors import HoardError

NO_SERVER = "hoardDB: no server client exists yet; use --data DIR for an embedded database"


def _shell_options(f):
    f = click.option("--continue-on-error", is_flag=True,
                     help="In a script, run the statements after a failing one too.")(f)
    f = click.option("-e", "--execute", "statement", metavar="STATEMENT",
                     help="Run these statements and exit.")(f)
    f = click.option("-f", "--file", "script", type=click.File("r", encoding="utf-8"),
                     help="Run the statements of FILE ('-' for standard input) and exit.")(f)
    f = click.option("--json", "json_mode", is_flag=True,
                     help="Print one line of relaxed Extended JSON per statement.")(f)
    f = click.option("--data", "data", metavar="DIR", type=click.Path(file_okay=False),
                     help="The data directory of an embedded database (created if missing).")(f)
    return f


def run_shell(data, json_mode=False, script=None, statement=None, continue_on_error=False) -> int:
    """Open ``data`` and run the shell on it; the exit status."""
    from . import open as open_database
    from .hql import printer
    from .shell import Shell, interactive

    if data is None:
        click.echo("give --data DIR, the data directory of an embedded database (see --help)", err=True)
        return 2
    if script is not None and statement is not None:
        click.echo("give -f FILE or -e STATEMENT, not both", err=True)
        return 2
    try:
        client = open_database(data)
    except HoardError as e:
        if json_mode:
            click.echo(printer.json_line(printer.error_answer(e)))
        else:
            click.echo(printer.format_error(e), err=True)
        return 1
    with client:
        shell = Shell(client, json_mode=json_mode)
        if statement is not None:
            text = statement
        elif script is not None:
            text = script.read()
        elif sys.stdin is not None and sys.stdin.isatty():
            interactive(shell)
            return 0
        else:
            text = sys.stdin.read() if sys.stdin is not None else ""
        return 0 if shell.run_text(text, continue_on_error=continue_on_error) else 1


@click.group()
@click.version_option(version=__version__, prog_name="hoardDB")
def main():
    """hoardDB: a document database whose documents own queues, stacks, sorted lists, heaps and files."""


@main.command()
@_shell_options
def shell(data, json_mode, script, statement, continue_on_error):
    """The HQL shell on an embedded database in DIR."""
    sys.exit(run_shell(data, json_mode, script, statement, continue_on_error))


@main.command()
@click.option("--data", "data", metavar="DIR", required=True, type=click.Path(file_okay=False),
              help="The data directory to tour in (created if missing).")
def tour(data):
    """A guided walk through the six store types."""
    from .tour import main as tour_main

    result = tour_main(data)
    sys.exit(result if isinstance(result, int) else 0)


@click.command(name="hoardDB")
@_shell_options
@click.option("-insecure", "insecure", is_flag=True, help="Reach a server without TLS (not yet available).")
@click.option("--host", help="The server to reach (not yet available).")
@click.option("--port", type=int, help="The server's port (not yet available).")
@click.version_option(version=__version__, prog_name="hoardDB")
def shell_main(data, json_mode, script, statement, continue_on_error, insecure, host, port):
    """The hoardDB shell (the same as `hoarddb shell`)."""
    if insecure or host is not None or port is not None:
        click.echo(NO_SERVER, err=True)
        sys.exit(2)
    sys.exit(run_shell(data, json_mode, script, statement, continue_on_error))


if __name__ == "__main__":
    main()
