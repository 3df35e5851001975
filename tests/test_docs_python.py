"""The ```python examples of README.md and docs/user, run as a reader pastes them.

A page's blocks run in order, in one namespace, with a fresh temporary directory as the
working directory, so a block may use what an earlier block of its page made. An HTML
comment just before a block, which a reader does not see, tells this file more:

* ``<!-- setup: CODE -->``: run CODE first, what the text around the block assumes (a
  ``db``, a bucket holding a document, a file to load);
* ``<!-- not run: REASON -->``: leave the block out (keep these rare).

A ``hoarddb://host:port`` URL is rewritten to a server started for the page (insecure if
the URL says so, else TLS, with the URL's user), and nothing else is. An expression whose
comment is a Python literal (``q.pop()  # {'a': 1}``) must give that value. XFAIL names
the blocks known to fail, by a line of each, with the reason.
"""

from __future__ import annotations

import ast
import contextlib
import re
from urllib.parse import urlsplit

import pytest

import hoarddb
from hoarddb.server.users import UserStore
from hoarddb.testing import ServerThread

from .test_shell_docs import README, REPO

PAGES = [README, *sorted((REPO / "docs" / "user").rglob("*.md"))]
BLOCK = re.compile(r"(?:^<!-- (setup|not run):\s*((?:(?!-->).)*?)\s*-->\n)?^```python\n(.*?)^```$", re.M | re.S)
URL = re.compile(r"hoarddb://[^\"'\s]+")

#: Blocks known to fail: page name -> {a line of the block: (the exception it raises, why)}.
XFAIL: dict[str, dict[str, tuple[type[Exception], str]]] = {}


def blocks(page) -> list[tuple[str, tuple[int, str], tuple[int, str]]]:
    """Every ```python block of a page: its mark ("setup", "not run" or ""), then the mark's text
    and the block's code, each with the line of the page it starts on."""
    text = page.read_text()
    at = lambda m, group: (text.count("\n", 0, m.start(group)) + 1, m.group(group) or "")  # noqa: E731
    return [(m.group(1) or "", at(m, 2), at(m, 3)) for m in BLOCK.finditer(text)]


def checked(code: str, page, line: int):
    """The block compiled, at its lines in the page, each ``expression  # literal`` checked against the literal."""
    tree, lines = ast.parse(code), code.splitlines()
    for node in ast.walk(tree):
        comment = isinstance(node, ast.Expr) and lines[node.end_lineno - 1][node.end_col_offset:].strip()
        if comment and comment.startswith("#"):
            shown = comment.lstrip("# ").removeprefix("-> ")
            with contextlib.suppress(ValueError, SyntaxError):
                ast.literal_eval(shown)
                node.value = ast.Call(ast.Name("__shows__", ast.Load()),
                                      [node.value, ast.parse(shown, mode="eval").body], [])
    ast.increment_lineno(ast.fix_missing_locations(tree), line - 1)
    return compile(tree, str(page), "exec")


def shows(value, shown):
    assert value == shown, f"the page shows {shown!r}, the example gives {value!r}"
    return value


def servers(stack: contextlib.ExitStack, tmp, urls) -> dict[str, str]:
    """The URLs that name a server (host:port), each rewritten to one started for the page: {URL: its
    rewrite}. The URLs that say ``insecure=true`` get an insecure server; the others one with TLS and
    their users (as admins), its fingerprint for their ``tls_fingerprint`` and its certificate for ``tls_ca``."""
    parts = {url: urlsplit(url) for url in urls if urlsplit(url).port}
    given = {url: dict(option.split("=", 1) for option in p.query.split("&") if option) for url, p in parts.items()}
    plain = {url: given[url].get("insecure") == "true" for url in parts}
    started: dict[bool, ServerThread] = {}
    if not all(plain.values()):
        for user in {(p.username, p.password) for url, p in parts.items() if p.username and not plain[url]}:
            UserStore(tmp / "tls").add(*user, ["admin"], iterations=4096)
        started[False] = stack.enter_context(ServerThread(tmp / "tls"))
    if any(plain.values()):
        started[True] = stack.enter_context(ServerThread(tmp / "insecure", insecure=True))
    rewritten = {}
    for url, p in parts.items():
        server, options = started[plain[url]], given[url]
        pins = {"tls_fingerprint": server.fingerprint, "tls_ca": server.cert}
        query = "&".join(f"{k}={pins.get(k, v)}" for k, v in options.items())
        user, at, _ = p.netloc.rpartition("@")
        rewritten[url] = f"hoarddb://{user}{at}{server.address}/?{query}"
    return rewritten


def close_clients(namespace: dict) -> None:
    for value in namespace.values():
        if isinstance(value, hoarddb.Client):
            value.close()


@pytest.mark.parametrize("page", [p for p in PAGES if "```python" in p.read_text()], ids=lambda p: p.name)
def test_python_blocks_run_as_written(page, tmp_path, monkeypatch):
    known, failed, found, text = XFAIL.get(page.name, {}), [], blocks(page), page.read_text()
    marks = len(re.findall(r"^<!-- (?:setup|not run):", text, re.M))
    assert (len(found), sum(bool(mark) for mark, _, _ in found)) == (text.count("```python"), marks), \
        "a ```python fence not at the start of a line, or a mark not just before its block"
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    with contextlib.ExitStack() as stack:
        urls = servers(stack, tmp_path, URL.findall("".join(note + code for _, (_, note), (_, code) in found)))
        namespace = {"__name__": "__main__", "__shows__": shows}
        stack.callback(close_clients, namespace)
        for mark, (note_line, note), (line, code) in found:
            if mark == "not run":
                continue
            for url, rewritten in urls.items():
                note, code = note.replace(url, rewritten), code.replace(url, rewritten)
            key = next((key for key in known if key in code), None)
            try:
                if mark == "setup":
                    exec(checked(note, page, note_line), namespace)
                exec(checked(code, page, line), namespace)
            except Exception as e:
                if key is None or not isinstance(e, known[key][0]):
                    raise
                failed.append(key)
                print(f"{page.name}:{line}: {e!r}")
            else:
                assert key is None, f"{page.name}:{line} runs now: take it out of XFAIL"
    assert sorted(failed) == sorted(known), "XFAIL names a block the page no longer has"
    if failed:
        pytest.xfail("; ".join(f"{key}: {known[key][1]}" for key in failed))
