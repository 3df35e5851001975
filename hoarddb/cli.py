"""The ``hoarddb`` and ``hoardDB`` commands.

    hoarddb shell --data DIR [--json] [-f FILE | -e STATEMENT] [--continue-on-error]
        the HQL shell on an embedded database: interactive on a terminal, else a script
        from standard input, from FILE, or the one STATEMENT
    hoarddb shell --host HOST [--port PORT] [--user USER] [--password P] [--tls-ca FILE |
                  --tls-fingerprint SHA256 | --insecure] [--url hoarddb://...] [...]
        the same shell on a server (password also from HOARDDB_PASSWORD)
    hoarddb tour [--data DIR]
        a guided walk through the six store types, on a database in DIR (default: a temporary one)
    hoarddb server --data DIR [--host H] [--port P] [--config FILE] [--metrics-port N]
                   [--insecure] [--tls-cert FILE --tls-key FILE] [...]
        run a server (TLS and authentication on unless --insecure, which is loopback only)
    hoarddb user add|remove|list|passwd|role [NAME] [ROLE...] --data DIR [--role ROLE[:DB]]...
        manage the server's users (roles: admin, read:DB, readWrite:DB, dbAdmin:DB)
    hoarddb check DIR [--db NAME] [--bucket NAME] [--json]
        read every file of a data directory that nothing has open and say what is wrong
        (exit 0: sound, 1: problems found, 2: usage, or the directory in use)
    hoarddb compact DIR [--db NAME] [--bucket NAME] [--json]
        give back the disk space deleted data left in the LMDB files of a data directory
        that nothing has open (exit 0: done, 1: some could not be compacted, 2: usage, or
        the directory in use)
    hoarddb slowlog [--limit N] [--reset] [--json] [--host H --port P --user U ...]
        a running server's last requests slower than slow_ms, newest first (an admin)
    hoardDB [same options as hoarddb shell] [-insecure]
        the same shell; -insecure reaches a local server without TLS; with no --data and no
        address, the server on 127.0.0.1:7070 (a self-signed one trusted on first use, as ssh
        does: hoarddb/client/known_hosts.py)
    hoarddb cluster up --data DIR [--nodes N] [--port P] | down --data DIR | status --cluster etcd://H:P
        a cluster on this machine (etcd and one node per core), its stop, and any cluster's nodes and partitions
    hoarddb cluster add-node NODE | remove-node NODE --cluster etcd://H:P [--wait S]
        move partitions to a node that joined, or off a node to be stopped, while serving
    hoarddb help [COMMAND...], hoarddb, hoarddb --help
        the list of commands (each with its first sentence whole), or one command's help

Exit status: 0 when every statement succeeded, 1 when one failed (or the data
directory could not be opened), 2 for a usage error. An interactive session exits 0:
its errors are shown as they happen.
"""

from __future__ import annotations

import sys

import click

from . import __version__
from .errors import HoardError

#: Kept for scripts that matched it; every server flag works now.
NO_SERVER = "hoardDB: no server client exists yet; use --data DIR for an embedded database"


def _shell_options(f):
    f = click.option("--continue-on-error", is_flag=True,
                     help="In a script, run the statements after a failing one too.")(f)
    f = click.option("-e", "--execute", "statement", metavar="STATEMENT", multiple=True,
                     help="Run these statements and exit (repeat -e for more: they run in order).")(f)
    # surrogateescape: a byte that is not UTF-8 reaches the parser, which refuses it with its position
    f = click.option("-f", "--file", "script", type=click.File("r", encoding="utf-8", errors="surrogateescape"),
                     help="Run the statements of FILE ('-' for standard input) and exit.")(f)
    f = click.option("--json", "json_mode", is_flag=True,
                     help="Print one line of relaxed Extended JSON per statement.")(f)
    f = click.option("--data", "data", metavar="DIR", type=click.Path(),  # a file: refused by the open, status 1
                     help="The data directory of an embedded database (created if missing).")(f)
    return f


def _remote_options(f, insecure_names=("--insecure",)):
    """The connection options every client command shares (see hoarddb.client.options)."""
    f = click.option("--timeout", type=float, default=None, help="Seconds to wait with nothing from the server "
                     "while an answer is due (60).")(f)
    f = click.option("--tls-fingerprint", "tls_fingerprint", metavar="SHA256",
                     help="Trust the server whose certificate has this SHA-256 fingerprint (it prints it at start).")(f)
    f = click.option("--tls-ca", "tls_ca", metavar="FILE", type=click.Path(dir_okay=False),
                     help="Verify the server against this CA (or its own certificate, DATA/tls/server.crt).")(f)
    f = click.option("--password", default=None,
                     help="The user's password (better: HOARDDB_PASSWORD, or type it when asked).")(f)
    f = click.option("--user", "-u", "user", default=None, help="Log in as this user.")(f)
    f = click.option(*insecure_names, "insecure", is_flag=True, default=None,
                     help="No TLS, no login: for a local server started with --insecure.")(f)
    f = click.option("--port", type=int, default=None, help="The server's port (default 7070).")(f)
    f = click.option("--host", default=None, help="The server's address (default 127.0.0.1).")(f)
    f = click.option("--url", default=None, metavar="URL", help="hoarddb://user:password@host:port/?tls_ca=...")(f)
    return f


def remote_options(url=None, host=None, port=None, insecure=None, user=None, password=None, tls_ca=None,
                   tls_fingerprint=None, timeout=None):
    """The ConnectOptions the flags ask for, or None when none was given (embedded)."""
    from .client.options import ConnectOptions

    given = dict(host=host, port=port, insecure=insecure or None, user=user, password=password, tls_ca=tls_ca,
                 tls_fingerprint=tls_fingerprint, timeout=timeout)
    if url is None and all(v is None for v in given.values()):
        return None
    return ConnectOptions.from_url(url, **given)  # the password is asked for once the server is trusted (run_shell)


def _trusted(remote, default: bool):
    """``remote`` once its server is trusted, the password asked for after (never before).

    With --tls-fingerprint or --tls-ca, a TLS handshake checks the server by them first. With
    neither, a certificate this machine's CAs vouch for is trusted as is; any other is
    trusted on first use, as ssh does: its fingerprint is shown and, on a terminal, the user
    is asked once and the answer remembered in the known-hosts file (client/known_hosts.py);
    a certificate that differs from the one remembered is refused. ``default``: the address
    was not given (bare hoardDB), which a refused connection says."""
    from dataclasses import replace

    from .client.known_hosts import KnownHosts, NothingListens, NotTrusted, server_certificate
    from .errors import HoardConnectionError
    from .wire.fingerprint import fingerprint

    if remote.insecure:  # no certificate to check, no password to ask
        return remote
    interactive = sys.stdin is not None and sys.stdin.isatty()
    try:
        try:
            server_certificate(remote)  # by --tls-ca or --tls-fingerprint; else by this machine's CAs
        except NotTrusted:
            if remote.tls_ca or remote.tls_fingerprint:
                raise
            remote = replace(remote, tls_fingerprint=_trust_on_first_use(
                remote, fingerprint(server_certificate(remote, verify=False)), KnownHosts(), interactive))
            server_certificate(remote)  # pinned now: the server must still present it
    except NothingListens as e:
        if default:
            raise HoardConnectionError(
                f"no hoardDB server answers at {remote.address}, where hoardDB looks when given no address "
                f"({e.message.partition(': ')[2].partition(';')[0]}): start one with `hoarddb server --data DIR`, "
                "give a server's address with --host and --port, or open a data directory with --data DIR",
                outcome_unknown=False) from None
        raise
    if remote.user and remote.password is None and interactive:
        remote = replace(remote, password=click.prompt(f"password for {remote.user}", hide_input=True, err=True))
    return remote


def _trust_on_first_use(remote, fp: str, known, interactive: bool) -> str:
    """The fingerprint to pin for ``remote``, whose certificate has ``fp``: the one remembered, or
    ``fp`` once the user said yes (and it is remembered); HoardConnectionError otherwise."""
    from .client.known_hosts import same
    from .errors import HoardConnectionError

    remembered = known.get(remote.address)
    if remembered is not None:
        if same(remembered, fp):
            return fp
        raise HoardConnectionError(
            f"THE CERTIFICATE OF THE SERVER AT {remote.address} HAS CHANGED. It presents SHA-256 fingerprint {fp}, "
            f"but {known.path} remembers {remembered}. Someone may be between you and the server, or its "
            "certificate was replaced. Refusing to connect. If it was replaced on purpose, compare the new "
            f"fingerprint with the one in the server's start line, then remove the line of {remote.address} from "
            f"{known.path} (or pass --tls-fingerprint NEW)", outcome_unknown=False)
    if not interactive:
        raise HoardConnectionError(
            f"the server at {remote.address} presents a certificate this machine does not trust, SHA-256 fingerprint "
            f"{fp}, and none is remembered for it in {known.path}; standard input is not a terminal, so nobody can "
            "be asked. Compare it with the fingerprint in the server's start line, then pass --tls-fingerprint "
            "with it (or --tls-ca with a copy of the server's DATA/tls/server.crt), or connect once from a "
            "terminal to remember it", outcome_unknown=False)
    click.echo(f"The server at {remote.address} is not known yet. Its certificate's SHA-256 fingerprint is\n"
               f"    {fp}\nCompare it with the fingerprint in the server's start line.", err=True)
    if not click.confirm(f"Trust this server and remember it in {known.path}?", default=False, err=True):
        raise HoardConnectionError(f"not trusting the server at {remote.address}: nothing was sent to it",
                                   outcome_unknown=False)
    known.remember(remote.address, fp)
    click.echo(f"remembered {remote.address} in {known.path}", err=True)
    return fp


def run_shell(data, json_mode=False, script=None, statement=None, continue_on_error=False, remote=None) -> int:
    """Open ``data`` (or connect to the server of ``remote``, a ConnectOptions) and run the shell; the exit status."""
    from . import open as open_database
    from .hql import printer
    from .shell import Shell, interactive, is_terminal_session

    if data is None and remote is None:  # nothing said: the server on this machine, as mongosh and redis-cli do
        remote = "default"
    if data is not None and remote is not None:
        click.echo("give --data DIR or a server (--host, --port, -insecure, --url), not both", err=True)
        return 2
    if script is not None and statement is not None:
        click.echo("give -f FILE or -e STATEMENT, not both", err=True)
        return 2
    default = remote == "default"
    try:
        if remote is not None:
            from .api import Client
            from .client import RemoteExecutor
            from .client.options import ConnectOptions

            remote = _trusted(ConnectOptions() if default else remote, default)
            client = Client(RemoteExecutor(remote))
        else:
            client = open_database(data)
    except HoardError as e:
        if json_mode:
            click.echo(printer.json_line(printer.error_answer(e)))
        else:
            click.echo(printer.format_error(e), err=True)
        return 1
    with client:
        shell = Shell(client, json_mode=json_mode)
        try:
            if statement is not None:
                text = statement
            elif script is not None:
                text = script.read()
            elif is_terminal_session():
                interactive(shell, where=_where(client, data, remote))
                return 0
            else:
                text = sys.stdin.read() if sys.stdin is not None else ""
            text = text.removeprefix("\ufeff")  # an editor's byte-order mark: columns count from the first character
            return 0 if shell.run_text(text, continue_on_error=continue_on_error) else 1
        except KeyboardInterrupt:  # Ctrl-C in a script: stop there, as a shell does, without a traceback
            click.echo("interrupted: the statements answered above ran; one running then may or may not have",
                       err=True)
            return 130


def _where(client, data, remote) -> str:
    """The banner's line on where the shell is: the server's address and version, the user, the database."""
    if remote is None:
        return f"embedded database in {data} (hoardDB {__version__}); no database yet: `use NAME`"
    try:  # the server names itself and its version in its hello: "hoardDB 0.1.0"
        server = client._executor.server_info.get("server") or "hoardDB ?"
    except HoardError:
        server = "hoardDB ?"
    user = f"user {remote.user}" if remote.user else "no user (insecure)" if remote.insecure else "no user"
    tls = "insecure" if remote.insecure else "TLS"
    return f"connected to {remote.address} ({server}, {tls}) as {user}; no database yet: `use NAME`"


class _Group(click.Group):
    """A command group whose list of commands shows each command's first sentence whole, never cut with "..."."""

    group_class = type  # its subgroups (hoarddb user) list their commands so too

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, cmd.get_short_help_str(limit=sys.maxsize))
                for name in self.list_commands(ctx)
                if (cmd := self.get_command(ctx, name)) is not None and not cmd.hidden]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=_Group, invoke_without_command=True)
@click.version_option(version=__version__, prog_name="hoardDB")
@click.pass_context
def main(ctx):
    """hoardDB: a document database whose documents own queues, stacks, sorted lists, heaps and files.

    `hoarddb COMMAND --help` (or `hoarddb help COMMAND`) describes a command.
    """
    _speak_flags(ctx)
    if ctx.invoked_subcommand is None:  # bare `hoarddb`: the help, and success
        click.echo(ctx.get_help())
        ctx.exit(0)


def _speak_flags(ctx: click.Context) -> None:
    """For this command's run, the client's advice names the flags to give, not keyword arguments."""
    from .client.options import CALLER

    token = CALLER.set("flags")
    ctx.call_on_close(lambda: CALLER.reset(token))


@main.command("help")
@click.argument("command", nargs=-1)
@click.pass_context
def help_command(ctx, command):
    """Show this help, or a command's: hoarddb help shell, hoarddb help user add."""
    target, target_ctx = main, ctx.parent
    for name in command:
        sub = target.get_command(target_ctx, name) if isinstance(target, click.Group) else None
        if sub is None:
            known = ", ".join(target.list_commands(target_ctx)) if isinstance(target, click.Group) else "none"
            click.echo(f"hoarddb help: no command {' '.join(command)!r}; commands: {known}", err=True)
            ctx.exit(2)
        target_ctx = click.Context(sub, info_name=name, parent=target_ctx)
        target = sub
    click.echo(target_ctx.get_help())


@main.command()
@_shell_options
@_remote_options
def shell(data, json_mode, script, statement, continue_on_error, url, host, port, insecure, user, password,
          tls_ca, tls_fingerprint, timeout):
    """The HQL shell on an embedded database in DIR, or on a server."""
    _shell_command("hoarddb shell", data, json_mode, script, statement, continue_on_error,
                   (url, host, port, insecure, user, password, tls_ca, tls_fingerprint, timeout))


def _shell_command(prog: str, data, json_mode, script, statement, continue_on_error, remote_args) -> None:
    """What `hoarddb shell` and `hoardDB` both do: check the connection options, run, exit."""
    try:
        remote = remote_options(*remote_args)
    except HoardError as e:
        click.echo(f"{prog}: {e.message}", err=True)
        sys.exit(2)
    statement = "\n".join(statement) if statement else None  # each -e, in order (none was silently dropped)
    sys.exit(run_shell(data, json_mode, script, statement, continue_on_error, remote))


@main.command()
@click.option("--data", "data", metavar="DIR", type=click.Path(file_okay=False),
              help="The data directory (created if missing). Also HOARDDB_DATA, or data: in --config.")
@click.option("--config", "config_file", metavar="FILE", type=click.Path(dir_okay=False),
              help="A YAML file of options (port: 7070, ...); flags and HOARDDB_* variables win over it.")
@click.option("--host", default=None, help="Address to listen on (default 127.0.0.1).")
@click.option("--port", type=int, default=None, help="Port to listen on (default 7070; 0 picks a free one).")
@click.option("--metrics-port", "metrics_port", type=int, default=None,
              help="Port of /metrics and /healthz (default 7071; 0 picks one; -1 turns it off).")
@click.option("--insecure", "insecure", is_flag=True, default=None,
              help="No TLS and no authentication; loopback addresses only.")
@click.option("--tls-cert", "tls_cert", metavar="FILE", default=None, help="PEM certificate to serve.")
@click.option("--tls-key", "tls_key", metavar="FILE", default=None, help="Its PEM private key.")
@click.option("--max-connections", "max_connections", type=int, default=None, help="Connections at most (1000).")
@click.option("--idle-timeout", "idle_timeout", type=float, default=None,
              help="Seconds before an idle connection is closed, and that a message may take to arrive "
                   "or answers may stay unread (300; 0 never).")
@click.option("--log-level", "log_level", default=None, help="debug, info, warning or error (info).")
@click.option("--log-format", "log_format", default=None,
              help="text (for people), or json: one JSON object a line, for a log collector (text).")
@click.option("--slow-ms", "slow_ms", type=float, default=None, metavar="MS",
              help="Log requests that take this many milliseconds or more, and keep them for "
                   "`hoarddb slowlog` (100).")
@click.option("--event-loop", "event_loop", default=None,
              help="uvloop, asyncio, or auto: uvloop where installed (auto).")
@click.option("--busy-poll", "busy_poll", type=int, default=None, metavar="US",
              help="Microseconds to poll a lone client's socket after an answer before sleeping (200; 0 off).")
@click.option("--cluster", "cluster", default=None, metavar="etcd://HOST:PORT[,...]",
              help="Join the cluster whose map these etcd members hold (docs/user/cluster.md).")
@click.option("--node-id", "node_id", default=None, metavar="NAME", help="This node's name in the cluster.")
@click.option("--advertise", "advertise", default=None, metavar="HOST:PORT",
              help="Where other nodes and clients reach this node (default: --host and --port).")
@click.option("--join", "join", is_flag=True, default=None,
              help="Once up, take this node's share of the cluster's partitions (as `cluster add-node`).")
@click.option("--drain-on-stop", "drain_on_stop", is_flag=True, default=None,
              help="On SIGTERM or Ctrl-C, move this node's partitions to the others before stopping "
                   "(as `cluster remove-node`); a second signal stops at once.")
@click.option("--drain-timeout", "drain_timeout", type=float, default=None, metavar="S",
              help="Seconds a stop waits for the drain's moves (300).")
def server(config_file, **flags):
    """Run a hoardDB server on a data directory until SIGTERM or Ctrl-C.

    TLS (a self-signed certificate in DATA/tls/ unless --tls-cert) and authentication
    (SCRAM-SHA-256; manage users with `hoarddb user`) are on unless --insecure.
    """
    from .server import ServerConfig, run

    try:
        config = ServerConfig.load(flags, config_file)
    except HoardError as e:
        click.echo(f"hoarddb server: {e.message}", err=True)
        sys.exit(2)
    sys.exit(run(config))


@main.group()
def user():
    """Manage the users of a server's data directory (the server may be running)."""


def _users(data):
    from .server.users import UserStore

    return UserStore(data)


def _new_password(name: str, password_stdin: bool) -> str:
    """A new password for ``name``, at least the minimum length (HOARDDB_MIN_PASSWORD_LENGTH, else 8)."""
    import os

    from .server.users import check_password, min_password_length

    minimum = min_password_length()
    if password_stdin:
        password = sys.stdin.readline().rstrip("\n")
    else:
        password = os.environ.get("HOARDDB_PASSWORD") or click.prompt(
            f"password for {name}", hide_input=True, confirmation_prompt=True)
    if not password:
        raise click.UsageError("the password is empty")
    return check_password(password, minimum)


_data_option = click.option("--data", "data", metavar="DIR", required=True, type=click.Path(file_okay=False),
                            help="The server's data directory.")
_stdin_option = click.option("--password-stdin", is_flag=True,
                             help="Read the password from the first line of standard input "
                                  "(else HOARDDB_PASSWORD, else a prompt).")
_iterations_option = click.option("--iterations", type=int, default=None,
                                  help="PBKDF2 iterations of the SCRAM keys (default 100000; at least 4096).")


def _user_errors(fn):
    import functools

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (HoardError, ValueError) as e:
            click.echo(f"hoarddb user: {getattr(e, 'message', e)}", err=True)
            sys.exit(1)
    return wrapper


@user.command("add")
@click.argument("name")
@_data_option
@click.option("--role", "roles", multiple=True, required=True,
              help="admin, or read:DB, readWrite:DB, dbAdmin:DB; repeat for more.")
@_stdin_option
@_iterations_option
@_user_errors
def user_add(name, data, roles, password_stdin, iterations):
    """Add a user with its roles."""
    from .server.users import parse_role
    from .wire.scram import DEFAULT_ITERATIONS

    for role in roles:
        parse_role(role)
    store = _users(data)
    store.require_absent(name)  # before asking for a password (and a damaged file is said first)
    record = store.add(name, _new_password(name, password_stdin), list(roles),
                       iterations=iterations or DEFAULT_ITERATIONS)
    click.echo(f"added user {record['name']} ({', '.join(record['roles'])})")


@user.command("passwd")
@click.argument("name")
@_data_option
@_stdin_option
@_iterations_option
@_user_errors
def user_passwd(name, data, password_stdin, iterations):
    """Set a user's password (a running server closes its open connections at their next request)."""
    from .wire.scram import DEFAULT_ITERATIONS

    store = _users(data)
    if store.get(name) is None:
        from .errors import NotFoundError

        raise NotFoundError(f"no user {name!r}; `hoarddb user list` shows the users")
    store.set_password(name, _new_password(name, password_stdin), iterations=iterations or DEFAULT_ITERATIONS)
    click.echo(f"changed the password of {name}")


@user.command("role")
@click.argument("name")
@click.argument("roles", nargs=-1, required=True, metavar="ROLE...")
@_data_option
@_user_errors
def user_role(name, roles, data):
    """Set a user's roles, replacing those it has: admin, or read:DB, readWrite:DB, dbAdmin:DB
    (`none` for no role). A running server applies them to the user's open connections at
    their next request."""
    roles = [] if list(roles) == ["none"] else list(roles)
    record = _users(data).set_roles(name, roles)
    click.echo(f"roles of {record['name']}: {', '.join(record['roles']) or 'none'}")


@user.command("remove")
@click.argument("name")
@_data_option
@_user_errors
def user_remove(name, data):
    """Remove a user (a running server refuses its open connections' next request, then closes them)."""
    _users(data).remove(name)
    click.echo(f"removed user {name}")


@user.command("list")
@_data_option
@_user_errors
def user_list(data):
    """The users and their roles, one per line."""
    from .server.users import format_role

    for record in _users(data).users():
        click.echo(f"{record['name']}\t{', '.join(format_role(r) for r in record['roles'])}")


@main.command()
@click.option("--data", "data", metavar="DIR", default=None, type=click.Path(file_okay=False),
              help="The data directory to tour in (created if missing); default: a temporary one, removed after.")
def tour(data):
    """A guided walk through the six store types, on an embedded database."""
    from .tour import main as tour_main

    result = tour_main(data)
    sys.exit(result if isinstance(result, int) else 0)


def _closed_directory_options(verb: str, online: bool = False):
    """The arguments of a tool run on a closed data directory (check, compact): DIR and its scope
    (``online``: DIR may be left out for a server's options, see hoarddb/tools/online.py)."""
    def decorate(f):
        if online:
            from .tools.commands import server_options
            f = server_options(f)
        f = click.option("--json", "json_mode", is_flag=True, help="Print the report as one line of JSON.")(f)
        f = click.option("--bucket", "bucket", metavar="NAME", default=None,
                         help=f"{verb} only this bucket (of --db).")(f)
        f = click.option("--db", "db", metavar="NAME", default=None, help=f"{verb} only this database's buckets.")(f)
        return click.argument("directory", metavar="[DIR]" if online else "DIR",
                              type=click.Path(exists=True, file_okay=False), required=not online)(f)
    return decorate


@main.group()
def cluster():
    """Run a cluster on this machine, and see any cluster's nodes and partitions (docs/user/cluster.md)."""


@cluster.command("up")
@click.option("--data", "data", metavar="DIR", required=True, type=click.Path(file_okay=False),
              help="Where etcd's and each node's data go (DIR/n1, DIR/n2...).")
@click.option("--nodes", type=int, default=None, help="How many nodes (default: one per core).")
@click.option("--port", type=int, default=7070, help="The first node's port, its metrics on the next; the next nodes count up by 2 (7070; 0: free ports).")
def cluster_up(data, nodes, port):
    """Start etcd and one node per core in the background, on 127.0.0.1 without TLS (for one machine)."""
    from .cluster import local

    try:
        started = local.up(data, nodes, port)
    except HoardError as e:
        click.echo(f"hoarddb cluster up: {e.message}", err=True)
        sys.exit(1)
    click.echo(f"etcd at {started['etcd']['url']}; nodes: "
               + ", ".join(f"{n['id']} on 127.0.0.1:{n['port']}" for n in started["nodes"]))
    click.echo(f"connect to: {started['url']}")
    click.echo(f"status:     hoarddb cluster status --cluster {started['etcd']['url']}")
    click.echo(f"stop it:    hoarddb cluster down --data {data}")


@cluster.command("down")
@click.option("--data", "data", metavar="DIR", required=True, type=click.Path(file_okay=False),
              help="The directory given to `hoarddb cluster up`.")
def cluster_down(data):
    """Stop the nodes and the etcd that `hoarddb cluster up --data DIR` started (data kept)."""
    from .cluster import local

    try:
        stopped = local.down(data)
    except HoardError as e:
        click.echo(f"hoarddb cluster down: {e.message}", err=True)
        sys.exit(1)
    click.echo("stopped: " + (", ".join(stopped) or "nothing was running"))


@cluster.command("status")
@click.option("--cluster", "cluster_url", metavar="etcd://HOST:PORT[,...]", default=None,
              help="The cluster's etcd members (default: HOARDDB_CLUSTER).")
@click.option("--json", "json_mode", is_flag=True, help="As JSON.")
def cluster_status(cluster_url, json_mode):
    """The nodes of a cluster, and each bucket's partitions per node (held / assigned)."""
    import json
    import os

    from .cluster import local

    url = cluster_url or os.environ.get("HOARDDB_CLUSTER")
    if not url:
        click.echo("hoarddb cluster status: give --cluster etcd://HOST:PORT (or set HOARDDB_CLUSTER)", err=True)
        sys.exit(2)
    try:
        st = local.status(url)
    except HoardError as e:
        click.echo(f"hoarddb cluster status: {e.message}", err=True)
        sys.exit(1)
    click.echo(json.dumps(st, indent=2) if json_mode else local.format_status(st))


def _change_nodes(name, cluster_url, node, wait, json_mode, add):
    import json
    import os

    from .cluster import local

    url = cluster_url or os.environ.get("HOARDDB_CLUSTER")
    if not url:
        click.echo(f"hoarddb cluster {name}: give --cluster etcd://HOST:PORT (or set HOARDDB_CLUSTER)", err=True)
        sys.exit(2)
    try:
        planned = local.change_nodes(url, add=node if add else None, remove=None if add else node)
    except HoardError as e:
        click.echo(f"hoarddb cluster {name}: {e.message}", err=True)
        sys.exit(1)
    if json_mode:
        click.echo(json.dumps(planned, indent=2))
    else:
        click.echo(f"node {node} {'added' if add else 'removed'}: {len(planned['moves'])} partition(s) to move"
                   + ("" if wait else f"; follow them with: hoarddb cluster status --cluster {url}"))
    if wait and planned["moves"] and not local.wait_moves(url, wait):
        click.echo(f"hoarddb cluster {name}: the moves did not end within {wait} s; they go on "
                   "(hoarddb cluster status)", err=True)
        sys.exit(1)


@cluster.command("add-node")
@click.argument("node")
@click.option("--cluster", "cluster_url", metavar="etcd://HOST:PORT[,...]", default=None,
              help="The cluster's etcd members (default: HOARDDB_CLUSTER).")
@click.option("--wait", type=float, default=0, metavar="SECONDS", help="Wait up to this long for the moves to end.")
@click.option("--json", "json_mode", is_flag=True, help="The moves planned, as JSON.")
def cluster_add_node(node, cluster_url, wait, json_mode):
    """Give NODE (started with --cluster and --node-id NODE) its share of every spread bucket: the moves are recorded
    in etcd and the nodes run them while serving."""
    _change_nodes("add-node", cluster_url, node, wait, json_mode, add=True)


@cluster.command("remove-node")
@click.argument("node")
@click.option("--cluster", "cluster_url", metavar="etcd://HOST:PORT[,...]", default=None,
              help="The cluster's etcd members (default: HOARDDB_CLUSTER).")
@click.option("--wait", type=float, default=0, metavar="SECONDS", help="Wait up to this long for the moves to end.")
@click.option("--json", "json_mode", is_flag=True, help="The moves planned, as JSON.")
def cluster_remove_node(node, cluster_url, wait, json_mode):
    """Move NODE's partitions to the other nodes while serving; NODE (up until they are moved) then holds none and
    may be stopped."""
    _change_nodes("remove-node", cluster_url, node, wait, json_mode, add=False)


@main.command("check")
@_closed_directory_options("Check", online=True)
def check_command(directory, db, bucket, json_mode, **server):
    """Read every file of the data directory DIR and say what is wrong with it.

    Nothing may have DIR open (a server, another process): the check takes its lock.
    Repairs a crash left run first, as at any open; a sound directory is not changed.
    Exit status: 0 when everything checked is sound, 1 when problems were found (one
    line each: where, the file, what is wrong, what to do), 2 for a usage error or a
    directory that cannot be checked now. docs/user/check.md says what is checked.

    Without DIR, checks a running server's buckets instead (--host/--port..., an admin).
    """
    from .tools.check import check, format_json

    if directory is None:
        from .tools.online import check_command_online
        sys.exit(check_command_online(db, bucket, json_mode, server))
    _report("check", check, format_json, directory, db, bucket, json_mode)


@main.command("compact")
@_closed_directory_options("Compact")
def compact_command(directory, db, bucket, json_mode):
    """Give back the disk space deleted data left in the LMDB files of the data directory DIR.

    Nothing may have DIR open (a server, another process): compacting takes its lock.
    Repairs a crash left run first, as at any open. Files are done one at a time, each
    needing free disk space for its compacted copy (at most its own size). Exit status:
    0 when every file was compacted (or already was), 1 when some could not be (one line
    each says why; they are left as they were), 2 for a usage error or a directory that
    cannot be compacted now. docs/user/compact.md says more.
    """
    from .tools.compact import compact, format_json

    _report("compact", compact, format_json, directory, db, bucket, json_mode)


def _server_options(f):
    """The options naming a running server (hoarddb/tools/commands.py's, as ping and status take)."""
    from .tools.commands import server_options

    return server_options(f)


@main.command("slowlog")
@click.option("--limit", type=int, default=None, help="Show at most this many entries, newest first.")
@click.option("--reset", is_flag=True, help="Forget the entries after showing them.")
@click.option("--json", "json_mode", is_flag=True, help="Print the answer as one line of JSON.")
@_server_options
def slowlog_command(limit, reset, json_mode, **server):
    """A running server's slow log: its last requests slower than slow_ms, newest first (an admin).

    One line each: when, how long, the operation and where, the client and its user, and
    the refusal's code if it was refused. The server keeps slowlog_length entries (128).
    """
    import json

    import hoarddb

    from .tools.commands import server_address

    from .operations import SLOWLOG

    request: dict = {"op": SLOWLOG.name}
    if limit is not None:
        request["limit"] = limit
    if reset:
        request["reset"] = True
    url, options = server_address(server)
    try:
        with hoarddb.connect(url, **options) as client:
            answer = client.execute(request).get("result") or {}
    except HoardError as e:
        click.echo(f"hoarddb slowlog: {e.codeName}: {e.message}", err=True)
        sys.exit(1)
    if json_mode:
        click.echo(json.dumps(answer, default=str))
        return
    entries = answer.get("entries") or []
    for e in entries:
        where = ".".join(x for x in (e.get("db"), e.get("bucket"), e.get("field")) if x)
        click.echo(f"{e['id']}  {e['time']:%Y-%m-%d %H:%M:%S}  {e['micros'] / 1000:9.1f} ms  {e['op']}"
                   f"{' ' + where if where else ''}  {e['peer']}{' ' + e['user'] if e.get('user') else ''}"
                   f"{'  refused ' + e['code'] if e.get('code') else ''}")
    click.echo(f"{len(entries)} slow request(s) (slow_ms {answer.get('slow_ms'):g}, "
               f"keeping the last {answer.get('slowlog_length')})")


def _report(name, tool, format_json, directory, db, bucket, json_mode):
    """Run a tool on a closed data directory (check, compact) and print its report; exit
    0 when it found nothing wrong, 1 when it did, 2 when it could not run."""
    try:
        report = tool(directory, db=db, bucket=bucket)
    except HoardError as e:
        click.echo(f"hoarddb {name}: {e.message}", err=True)
        sys.exit(2)
    if json_mode:
        click.echo(format_json(report))
    else:
        for line in report.lines():
            click.echo(line)
        click.echo(report.summary())
    sys.exit(0 if report.ok else 1)


@click.command(name="hoardDB")
@_shell_options
@lambda f: _remote_options(f, ("-insecure", "--insecure"))
@click.version_option(version=__version__, prog_name="hoardDB")
@click.pass_context
def shell_main(ctx, data, json_mode, script, statement, continue_on_error, url, host, port, insecure, user, password,
               tls_ca, tls_fingerprint, timeout):
    """The hoardDB shell (the same as `hoarddb shell`): --data DIR, or a server (-insecure for a local one;
    none given: the server on 127.0.0.1:7070)."""
    _speak_flags(ctx)
    _shell_command("hoardDB", data, json_mode, script, statement, continue_on_error,
                   (url, host, port, insecure, user, password, tls_ca, tls_fingerprint, timeout))


from .tools.commands import COMMANDS as _TOOL_COMMANDS  # noqa: E402 - hoarddb ingest|dump|restore (hoarddb/tools)

for _command in _TOOL_COMMANDS:
    main.add_command(_command)


if __name__ == "__main__":
    main()
