"""HQL text to statements, and statements to operation requests.

The grammar is hql.lark. This module drives lark's LALR parser token by token through
lark's public interactive parser (``parse_interactive``, ``choices``, ``accepts``,
``copy``, ``feed_token``; never its parse tables), which lets it do the three things a
plain ``Lark.parse`` cannot:

* parse a script one statement at a time (:func:`statements`), so the shell runs each
  statement before it reads the next, and a syntax error stops only its own statement;
* decide what a new line means: inside a bucket body it separates lines; after a
  complete statement it ends it (unless the next line can only continue it); anywhere
  else it is plain space;
* read a word as a keyword only where the grammar expects that keyword.

A :class:`Statement` is either shell state (``use``, ``help``, ``exit``) or an operation
request without its database; :meth:`Statement.to_request` adds the current one. Verbs,
their aliases and their argument binding come from :mod:`hoarddb.operations`.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from lark import Lark, Token, Transformer
from lark.exceptions import UnexpectedCharacters, UnexpectedToken, VisitError

from .. import operations
from ..operations import (ALTER_BUCKET, CREATE_BUCKET, CREATE_DATABASE, DESCRIBE_BUCKET, DROP_BUCKET, DROP_DATABASE,
                          LIST_BUCKETS, LIST_DATABASES, STATS)
from ..errors import (BadValueError, DatabaseNotFoundError, HoardError, InternalError, InvalidArgumentError,
                      SyntaxError_, UnknownVerbError)
from . import literals

GRAMMAR = (Path(__file__).with_name("hql.lark")).read_text(encoding="utf-8")

#: Every keyword of the grammar (its ``%declare`` line), by its lower-case spelling.
KEYWORDS: dict[str, str] = {
    name.lower(): name for name in re.search(r"^%declare (.*)$", GRAMMAR, re.M).group(1).split()
}

#: The keywords a statement starts with (db starts a call).
STATEMENT_KEYWORDS = ("create", "drop", "alter", "describe", "use", "show", "help", "exit", "quit", "db")

#: Statements that end with their line, complete or not, with how each is written: `use` on its
#: own is refused at its line's end instead of taking the next line as its name.
ONE_LINE = {"use": ("use NAME",), "show": ("show databases", "show buckets"), "describe": ("describe bucket NAME",),
            "drop": ("drop database NAME", "drop bucket NAME")}

#: Bucket methods that are not store verbs: ``db.Users.stats()`` is the engine's stats operation.
BUCKET_METHODS = {"stats": STATS.name}


class _KeepSemicolon:
    """A do-nothing post-lexer whose only job is to keep SEMI, which no rule uses, in the lexer."""

    always_accept = ("SEMI",)

    def process(self, stream):
        return stream


_LARK = Lark(GRAMMAR, parser="lalr", lexer="basic", start=["statement", "value"],
             postlex=_KeepSemicolon(), maybe_placeholders=False)

_CLOSE = {"RPAR": -1, "RSQB": -1, "RBRACE": -1}
_OPEN = {"LPAR": 1, "LSQB": 1, "LBRACE": 1}


@dataclass
class Statement:
    """Statement is one parsed HQL statement.

    ``kind`` is ``"request"`` (an operation for the engine), ``"use"``, ``"help"`` or
    ``"exit"``. A request statement holds its operation without ``db``; ``needs_db``
    says whether it needs the current database.
    """

    kind: str
    text: str = ""
    line: int = 1
    column: int = 1
    request: dict | None = None
    needs_db: bool = False
    name: str | None = None  # the database of `use`, the topic of `help`

    def to_request(self, db: str | None) -> dict:
        """The operation request, in database ``db``; refuses a call before ``use``."""
        if self.request is None:
            raise InvalidArgumentError(f"{self.kind} is a shell statement, not an operation")
        request = dict(self.request)
        if self.needs_db:
            if not db:
                raise DatabaseNotFoundError(
                    "no database selected: say `use <name>` first (`show databases` lists them, "
                    "`create database <name>` makes one)"
                )
            request = {"op": request.pop("op"), "db": db, **request}
        return request


# ---- errors ------------------------------------------------------------------------

_SHOWN = {"NAME": "a name", "STRING": "a string", "NUMBER": "a number", "NL": "a new line",
          "$END": "the end", "SEMI": "';'"}


def _show_terminal(name: str) -> str:
    if name in _SHOWN:
        return _SHOWN[name]
    if name in KEYWORDS.values():
        return name.lower()
    try:
        return repr(_LARK.get_terminal(name).pattern.value)
    except (KeyError, AttributeError):
        return name


def _show_token(tok: Token) -> str:
    if tok.type == "$END":
        return "end of input"
    if tok.type == "NL":
        return "end of line"
    text = tok.value if len(tok.value) <= 30 else tok.value[:27] + "..."
    return f"{text!r}"


def _expected(names, *, in_statement: bool = False) -> str:
    shown = sorted({_show_terminal(n) for n in names if not (in_statement and n == "$END")})
    if in_statement and "$END" in names:  # the statement could end here: say how one ends
        shown.append("';' or the end of the line")
    if len(shown) > 1:
        return ", ".join(shown[:-1]) + " or " + shown[-1]
    return shown[0] if shown else "nothing"


def _error(cls, message: str, tok: Token | None, *, at_end: bool = False) -> HoardError:
    line = getattr(tok, "line", None) or 1
    column = getattr(tok, "column", None) or 1
    err = cls(f"line {line}, column {column}: {message}")
    err.line, err.column, err.at_end = line, column, at_end
    return err


class _Positioned(Exception):
    """Carries an error out of the transformer with the token it is about."""

    def __init__(self, err: Exception, tok: Token | None):
        super().__init__(str(err))
        self.err, self.tok = err, tok


#: What a character HQL has no use for usually means, said after "unexpected character".
_CHARACTER_HINTS = {
    "/": ": HQL has no /regex/ literal; write Regex(\"^ab\", \"i\"), or {$regex: \"^ab\"} in a filter",
    "+": ": HQL has no arithmetic and no '+' sign; write the value itself (5, not +5)",
    "#": ": '--' starts a comment in HQL, '#' does not",
    "`": ": a string is quoted with \"...\" or '...', not backticks",
    "=": ": a document pairs a key with its value with ':', as in {a: 1}",
    "\u201c": ": a typographic quote; write a straight one, \" or '",
    "\u201d": ": a typographic quote; write a straight one, \" or '",
    "\u2018": ": a typographic quote; write a straight one, \" or '",
    "\u2019": ": a typographic quote; write a straight one, \" or '",
}

_CLOSER_OF = {"(": ")", "[": "]", "{": "}"}


def _at(tok: Token) -> str:
    return f"line {tok.line}, column {tok.column}"


def _unexpected(tok: Token, last: Token | None, opened: list, expected: set, in_statement: bool,
                text: str) -> tuple[str, Token]:
    """The message of a token the parser cannot take here, and the token it is about.

    It says what was found and what could come there, and, where the mistake is a common
    one (a JavaScript habit, an unbalanced bracket), what to write instead.
    """
    message = f"unexpected {_show_token(tok)}; expected {_expected(expected, in_statement=in_statement)}"
    if tok.type == "NAME":  # a keyword mistyped: shwo buckets, create buckt X
        words = [name.lower() for name in expected if name in KEYWORDS.values()]
        close = difflib.get_close_matches(tok.value.lower(), words, n=1, cutoff=0.6)
        if close and close[0] != tok.value.lower():
            message += f"; did you mean {close[0]}?"
    if last is not None and last.type == "NAME" and last.value == "new" and tok.type == "NAME":
        example = literals.CONSTRUCTORS.get(tok.value.lower())
        instead = example.example if example else f"{tok.value}(...)"
        if tok.value.lower() in ("date", "isodate"):
            instead += f", or {tok.value}() for now"
        return f"`new {tok.value}` is JavaScript; HQL calls a value constructor without `new`: {instead}", last
    if last is not None and last.type == "NAME" and tok.type == "DOT" and last.value == "Date":
        return "Date.now() is JavaScript; in HQL the current time is now() (or ISODate())", last
    if (last is not None and last.type == "NAME" and tok.type == "MINUS" and "COLON" in expected
            and tok.start_pos == last.end_pos):
        key = re.match(r"[\w$.-]+", text[last.start_pos:]).group(0)
        if "NAME" in expected:  # a line of a bucket body: its names are bare words
            return f"{key} is not a name: an option or field name is letters, digits and _ (segment_size)", last
        return f"a key with '-' in it is quoted: write \"{key}\": ..., as {{\"{key}\": 1}}", last
    if last is not None and last.type == "NUMBER" and tok.type == "NAME" and tok.start_pos == last.end_pos:
        return (f"{last.value}{tok.value} is not a number HQL reads; write an integer (1000), a hex integer "
                "(0x1F) or a double (2.5, 1e3)"), last
    if tok.type in ("RPAR", "RSQB", "RBRACE"):
        if not opened:
            return message + f"; this {tok.value!r} closes nothing, no bracket is open", tok
        if _CLOSER_OF[opened[-1].value] != tok.value:
            inner = opened[-1]
            return (message + f"; the {inner.value!r} at {_at(inner)} is still open: close it with "
                    f"{_CLOSER_OF[inner.value]!r} first"), tok
    elif opened and opened[-1].line < tok.line and _starts_statement(tok):  # ran on into the next statement
        inner = opened[-1]
        message += f" (the {inner.value!r} at {_at(inner)} is still open)"
    return message, tok


# ---- tokens ------------------------------------------------------------------------

class _ErrorToken(Token):
    """A character no terminal matches, standing in the token stream with its error."""

    error: HoardError


class _Source:
    """The tokens of a text, lexed lazily, with look-ahead, push-back and restart after a bad character."""

    def __init__(self, text: str):
        self.text = text
        self._buffer: list[Token] = []
        self._stream = _LARK.lex(text)
        self._base = (0, 1, 1)  # where the current lexer started: offset, line, column
        lines = text.split("\n")
        self.eof = Token("$END", "", len(text), len(lines), len(lines[-1]) + 1, len(lines), len(lines[-1]) + 1, len(text))

    def _pull(self) -> Token:
        try:
            tok = next(self._stream)
        except StopIteration:
            return self.eof
        except UnexpectedCharacters as e:
            pos, line, column = self._shift(e.pos_in_stream, e.line, e.column)
            # Lex on after the bad character, keeping line and column those of the whole text.
            self._base = (pos + 1, line, column + 1)
            self._stream = _LARK.lex(self.text[pos + 1:])
            ch = self.text[pos]
            tok = _ErrorToken("$ERROR", ch, pos, line, column, line, column + 1, pos + 1)
            if ch in "\"'":
                message = "unterminated string: a string ends with its opening quote on the same line"
            else:
                message = f"unexpected character {ch!r}" + _CHARACTER_HINTS.get(ch, "")
            tok.error = _error(SyntaxError_, message, tok)
            return tok
        if self._base == (0, 1, 1):
            return tok
        pos, line, column = self._shift(tok.start_pos, tok.line, tok.column)
        end_pos, end_line, end_column = self._shift(tok.end_pos, tok.end_line, tok.end_column)
        return Token(tok.type, tok.value, pos, line, column, end_line, end_column, end_pos)

    def _shift(self, pos: int, line: int, column: int) -> tuple[int, int, int]:
        """A position in the text lexed since the last restart, as a position in the whole text."""
        base_pos, base_line, base_column = self._base
        return pos + base_pos, line + base_line - 1, column + base_column - 1 if line == 1 else column

    def next(self) -> Token:
        return self._buffer.pop(0) if self._buffer else self._pull()

    def push(self, tok: Token) -> None:
        self._buffer.insert(0, tok)

    def peek_significant(self) -> Token:
        """The next token that is not a new line, without taking it."""
        i = 0
        while True:
            if i == len(self._buffer):
                self._buffer.append(self._pull())
            tok = self._buffer[i]
            if tok.type != "NL":
                return tok
            i += 1


# ---- the driver ----------------------------------------------------------------------

def _keyword(tok: Token) -> Token | None:
    if tok.type == "NAME" and tok.value.lower() in KEYWORDS:
        return Token.new_borrow_pos(KEYWORDS[tok.value.lower()], tok.value, tok)
    return None


class _Parser:
    """Lark's interactive parser for one statement, fed a token only where the token fits.

    Only lark's public interactive-parser API is used (``parse_interactive``, ``choices``,
    ``accepts``, ``copy``, ``feed_token``, ``feed_eof``), never its parse tables, so a lark
    upgrade cannot break the shell. ``choices`` lists every token that may fit, and more
    (an LALR table row can list a token the parser refuses only after a reduction);
    ``accepts`` is exact but tries each token on a copy, so it is asked only where the
    driver must know before it feeds (a keyword or a name? a new line or the end?), at
    most once per position.
    """

    def __init__(self, start: str, ip=None, fed: list[Token] | None = None):
        self.start = start
        self.ip = ip if ip is not None else _LARK.parse_interactive(start=start)
        self.fed: list[Token] = fed or []  # the statement's tokens so far, to rebuild the parser after a refusal
        self._accepts: set[str] | None = None

    def accepts(self) -> set[str]:
        """The terminals the parser takes next, ``$END`` among them when the statement can end here."""
        if self._accepts is None:
            self._accepts = set(self.ip.accepts())
        return self._accepts

    def fits(self, kind: str) -> bool:
        """Whether the parser takes a token of type ``kind`` next (asking ``accepts`` only when it may)."""
        return kind in self.ip.choices() and kind in self.accepts()

    def typed(self, tok: Token) -> Token | None:
        """``tok`` as the parser would take it (a keyword where a keyword fits, else itself), or None if neither fits."""
        if tok.type in ("$ERROR", "SEMI"):
            return None
        kw = _keyword(tok)
        if kw is not None and self.fits(kw.type):
            return kw
        return tok if self.fits(tok.type) else None

    def can_end(self) -> bool:
        return self.fits("$END")

    def take(self, tok: Token) -> bool:
        """Feed ``tok`` (as a keyword where a keyword fits); False, the parser as it was, when it does not fit."""
        choices = self.ip.choices()
        kw = _keyword(tok)
        if kw is not None and kw.type in choices and (tok.type not in choices or kw.type in self.accepts()):
            tok = kw
        elif tok.type not in choices:
            return False
        try:
            self.ip.feed_token(tok)
        except UnexpectedToken:
            # Refused after a reduction, which left the parser changed: rebuild it from the
            # statement's tokens, so that accepts() says what could have come instead.
            self.ip = _LARK.parse_interactive(start=self.start)
            for fed in self.fed:
                self.ip.feed_token(fed)
            self._accepts = None
            return False
        self.fed.append(tok)
        self._accepts = None
        return True

    def after(self, tok: Token) -> _Parser:
        """A separate parser that has taken ``tok`` too; this one is untouched."""
        other = _Parser(self.start, self.ip.copy(), [*self.fed, tok])
        other.ip.feed_token(tok)
        return other

    def finish(self, last: Token):
        """The statement's parse tree; :meth:`can_end` said it can end."""
        return self.ip.feed_eof(last)


def _usage(fed: list[Token]) -> str | None:
    """How the statement begun with the tokens ``fed`` is written, when it is one that ends with its line."""
    if not fed or fed[0].type == "NAME":
        return None
    typed = [t.value.lower() for t in fed]
    forms = [f for f in ONE_LINE.get(typed[0], ()) if f.split()[:len(typed)] == typed] or ONE_LINE.get(typed[0])
    return " or ".join(forms) if forms else None


def _starts_statement(tok: Token) -> bool:
    return tok.type == "NAME" and tok.value.lower() in STATEMENT_KEYWORDS


class _Driver:
    """Parses the statements of one text in order, recovering after each error."""

    def __init__(self, text: str, start: str = "statement"):
        self.src = _Source(text)
        self.start = start
        self.depth = 0
        self.opened: list[Token] = []  # the brackets open in the current statement, innermost last

    def one(self):
        """The next statement's parse tree and its first and last tokens, or None at the end."""
        src = self.src
        tok = src.next()
        while tok.type in ("NL", "SEMI"):
            tok = src.next()
        if tok.type == "$END":
            return None
        parser = _Parser(self.start)
        first, last = tok, None
        self.depth = 0
        self.opened = []
        while True:
            kind = tok.type
            if kind == "$ERROR":
                raise tok.error
            if kind in ("$END", "SEMI"):
                return self._finish(parser, first, last or first, tok)
            if kind == "NL":
                nxt = src.peek_significant()
                if parser.fits("NL"):
                    # A line break inside a bucket body separates its lines, unless what
                    # follows can only continue the current line.
                    after = parser.after(tok)
                    if parser.typed(nxt) is None or after.typed(nxt) is not None:
                        parser = after
                elif parser.can_end():
                    if (nxt.type in ("$END", "SEMI", "$ERROR") or _starts_statement(nxt)
                            or parser.typed(nxt) is None):
                        return self._finish(parser, first, last or first, tok)
                elif _usage(parser.fed):
                    return self._finish(parser, first, last or first, tok)
                tok = src.next()
                continue
            if not parser.take(tok):
                message, about = _unexpected(tok, last, self.opened, parser.accepts(), self.start == "statement",
                                             src.text)
                raise _error(SyntaxError_, message, about)
            self.depth += _OPEN.get(kind, 0) + _CLOSE.get(kind, 0)
            if kind in _OPEN:
                self.opened.append(tok)
            elif kind in _CLOSE and self.opened:
                self.opened.pop()
            last = tok
            tok = src.next()

    def _finish(self, parser: _Parser, first: Token, last: Token, end: Token):
        if not parser.can_end():
            what = "end of input" if end.type == "$END" else _show_token(end)
            message = f"the statement is incomplete at {what}; expected {_expected(parser.accepts())}"
            usage = _usage(parser.fed)
            if usage:
                message += f"; write {usage}"
            if self.opened and self.opened[-1].line < end.line:
                inner = self.opened[-1]
                message += f" (the {inner.value!r} at {_at(inner)} is still open)"
            # at_end: more input could finish it (the shell reads another line); a one-line
            # statement cannot be finished on the next line, so it is answered at once.
            err = _error(SyntaxError_, message, end, at_end=end.type == "$END" and not usage)
            err.terminated = True
            if end.type == "$END":
                err.expected = parser.accepts()  # what may come next, for completion
            raise err
        tree = parser.finish(last)
        self.depth = 0
        return tree, first, last

    def skip(self, err: HoardError) -> None:
        """Skip the rest of a statement that failed to parse, to where the next one starts."""
        if getattr(err, "terminated", False):
            return  # the error was found at the statement's end, which is already read
        src = self.src
        while True:
            tok = src.next()
            kind = tok.type
            if kind == "$END":
                src.push(tok)
                return
            if kind in ("SEMI", "NL") and self.depth <= 0:
                return
            if _starts_statement(tok) and tok.column == 1 and tok.line > getattr(err, "line", 0):
                src.push(tok)  # a statement keyword at the start of a line: start again here
                return
            self.depth += _OPEN.get(kind, 0) + _CLOSE.get(kind, 0)


# ---- trees to values and statements ------------------------------------------------------

class _Bare:
    """A bare word in a value; legal only as an option's value (``type: hash``)."""

    def __init__(self, tok: Token):
        self.tok = tok


#: Words other languages use for null.
_OTHER_NULLS = {"None", "undefined", "nil"}


def _no_bare(value: Any) -> Any:
    if isinstance(value, _Bare):
        name = value.tok.value
        if name in _OTHER_NULLS:
            hint = f"HQL writes null (or write the string \"{name}\")"
        elif name.lower() in literals.CONSTRUCTORS:
            hint = f"{name} is a value constructor, so call it: {literals.CONSTRUCTORS[name.lower()].example}"
        else:
            hint = f"write a string as \"{name}\", or a value such as true, null, 12 or ISODate(\"...\")"
        raise _Positioned(SyntaxError_(f"unquoted word {name}: {hint}"), value.tok)
    return value


def _tokens(children) -> list:
    """Children without keyword tokens."""
    return [c for c in children if not (isinstance(c, Token) and c.type in KEYWORDS.values())]


class _ToValues(Transformer):
    """Parse trees to Python values and :class:`Statement` objects."""

    # -- values
    def string(self, c):
        try:
            return literals.decode_string(c[0].value)
        except literals.LiteralError as e:
            raise _Positioned(BadValueError(str(e)), c[0])

    def number(self, c, negative=False):
        try:
            return literals.decode_number(c[0].value, negative)
        except literals.LiteralError as e:
            raise _Positioned(BadValueError(str(e)), c[0])

    def neg_number(self, c):
        return self.number(c, negative=True)

    def true(self, c):
        return True

    def false(self, c):
        return False

    def null(self, c):
        return None

    def bare(self, c):
        value = literals.BARE_VALUES.get(c[0].value)
        return _Bare(c[0]) if value is None else value

    def neg_bare(self, c):
        value = literals.BARE_VALUES.get(c[0].value)
        if value is None:
            raise _Positioned(SyntaxError_(f"'-' before {c[0].value}: only a number, Infinity or NaN can be negative"), c[0])
        return -value

    def constructor(self, c):
        name, args = c[0], [_no_bare(v) for v in c[1:]]
        try:
            return literals.construct(name.value, args)
        except (ValueError, OverflowError, TypeError) as e:  # LiteralError, or a value bson itself refuses
            raise _Positioned(BadValueError(str(e)), name)

    def object(self, c):
        doc: dict = {}
        for key, value, tok in c:
            if key in doc:
                raise _Positioned(BadValueError(f"key {key!r} is given twice in one document"), tok)
            doc[key] = value
        return doc

    def pair(self, c):
        key, tok = c[0]
        return key, _no_bare(c[1]), tok

    def path_key(self, c):
        return ".".join(t.value for t in c), c[0]

    def string_key(self, c):
        return self.string(c), c[0]

    def array(self, c):
        return [_no_bare(v) for v in c]

    # -- statements
    def name(self, c):
        tok = c[0]
        return (self.string(c) if tok.type == "STRING" else tok.value), tok

    def create_database(self, c):
        (db, _), = _tokens(c)
        return Statement("request", request={"op": CREATE_DATABASE.name, "db": db})

    def drop_database(self, c):
        (db, _), = _tokens(c)
        return Statement("request", request={"op": DROP_DATABASE.name, "db": db})

    def use(self, c):
        (db, _), = _tokens(c)
        return Statement("use", name=db)

    def show_databases(self, c):
        return Statement("request", request={"op": LIST_DATABASES.name})

    def show_buckets(self, c):
        return Statement("request", request={"op": LIST_BUCKETS.name}, needs_db=True)

    def create_bucket(self, c):
        parts = _tokens(c)
        (bucket, _), options = parts[0], (parts[1] if len(parts) > 1 else {})
        return Statement("request", request={"op": CREATE_BUCKET.name, "bucket": bucket, "options": options},
                         needs_db=True)

    def alter_bucket(self, c):
        (bucket, _), options = _tokens(c)
        return Statement("request", request={"op": ALTER_BUCKET.name, "bucket": bucket, "options": options},
                         needs_db=True)

    def describe_bucket(self, c):
        (bucket, _), = _tokens(c)
        return Statement("request", request={"op": DESCRIBE_BUCKET.name, "bucket": bucket}, needs_db=True)

    def drop_bucket(self, c):
        (bucket, _), = _tokens(c)
        return Statement("request", request={"op": DROP_BUCKET.name, "bucket": bucket}, needs_db=True)

    def help(self, c):
        parts = _tokens(c)
        return Statement("help", name=parts[0].value if parts else None)

    def exit(self, c):
        return Statement("exit")

    # -- bucket bodies
    def body(self, c):
        options: dict = {}
        for kind, name, value, tok in (x for x in c if isinstance(x, tuple)):
            if kind == "option":
                if name in options:
                    raise _Positioned(BadValueError(f"option {name!r} is given twice"), tok)
                options[name] = value
            else:
                entries = options.setdefault(kind, [])
                if not isinstance(entries, list):
                    raise _Positioned(BadValueError(f"{kind!r} is given both as an option and as lines"), tok)
                entries.append(value)
        return options

    def option(self, c):
        tok, value = c[0], c[1]
        if isinstance(value, _Bare):
            value = value.tok.value  # type: hash, placement: whole
        return "option", tok.value, value, tok

    def field(self, c):
        tok, type_name, keywords = c[0], c[1], [k.value for k in c[2:] if isinstance(k, Token)]
        lowered = type_name.lower()
        if lowered.endswith("store") and len(lowered) > len("store") and not lowered.startswith("[]"):
            # A store-field line: Expenses lifoStore -> {name: "Expenses", type: "lifo"}.
            if keywords:
                raise _Positioned(BadValueError(
                    f"store field {tok.value} ({type_name}) takes no keywords, got {' '.join(keywords)}"), tok)
            return "store_fields", tok.value, {"name": tok.value, "type": lowered[:-len("store")]}, tok
        if lowered in operations.STORE_TYPES:  # `type fifo`: a colon left out, or `Expenses lifo`: Store left out
            instead = (f"the bucket's type is the option `{tok.value}: {lowered}`, with a colon" if tok.value == "type"
                       else f"a store field on each document is `{tok.value} {lowered}Store`")
            raise _Positioned(BadValueError(
                f"field line `{tok.value} {type_name}` gives a field the store type {lowered}; {instead}"), tok)
        return "fields", tok.value, {"name": tok.value, "type": type_name, "keywords": keywords}, tok

    def nested_field(self, c):
        tok, type_name, options = c[0], c[1], c[2]
        kind, name, entry, _ = self.field([tok, type_name])
        if kind != "store_fields":
            raise _Positioned(BadValueError(
                f"field {tok.value} ({type_name}) is followed by a body {{...}}: only a hash or btree store field "
                f"declares store fields of its elements, such as `{tok.value} hashStore {{ Messages fifoStore }}`"),
                tok)
        other = sorted(k for k in options if k != "store_fields")
        if other:
            raise _Positioned(BadValueError(
                f"the body of store field {tok.value} declares its elements' store fields (`Messages fifoStore`), "
                f"nothing else; got {', '.join(other)}"), tok)
        if options.get("store_fields"):
            entry["store_fields"] = options["store_fields"]
        return kind, name, entry, tok

    def scalar_type(self, c):
        return c[0].value

    def array_type(self, c):
        return "[]" + c[0].value

    # -- calls
    def bucket_ref(self, c):
        return self.name(c)

    def field_ref(self, c):
        return self.name(c)

    def arguments(self, c):
        return [_no_bare(v) for v in c]

    def chained(self, c):
        return _Chained(c[0], c[1])

    def bucket_call(self, c):
        parts = _tokens(c)
        (bucket, btok), verb, args = parts[:3]
        chain = parts[3:]
        if isinstance(bucket, str) and "." in bucket:  # db["User.jane.Friends"].list(): a store by its dotted address
            return _dotted_call(bucket, btok, verb, args, chain)
        if verb.value not in operations.VERBS and verb.value in BUCKET_METHODS:
            if args:
                raise _Positioned(InvalidArgumentError(f"{verb.value}() takes no arguments"), verb)
            if chain:
                raise _Positioned(InvalidArgumentError(f"{verb.value}() takes no chained methods"), chain[0].tok)
            return Statement("request", request={"op": BUCKET_METHODS[verb.value], "bucket": bucket}, needs_db=True)
        request = _verb_request(bucket, verb, args)
        if chain:
            request = _apply_chain(request, verb, chain)
        return Statement("request", request=request, needs_db=True)

    def step(self, c):
        key, (field_name, tok) = c[0], c[1]
        return _Step(_no_bare(key), field_name, tok)

    def field_call(self, c):
        parts = _tokens(c)
        (bucket, _), key, (field_name, _) = parts[:3]
        steps = [p for p in parts[3:] if isinstance(p, _Step)]
        verb, args = parts[3 + len(steps):]
        op = operations.FIELD_VERBS.get(verb.value)
        if op is None and verb.value not in operations.VERBS:  # no verb at all: refused here, as on a bucket
            err = unknown_verb(verb.value, operations.FIELD_VERBS)
            err.called_on = (bucket, ".".join([field_name, *(step.field for step in steps)]), verb.value)
            raise _Positioned(err, verb)
        if op is None:  # no store field has it (update, range...): the engine refuses it with advice
            name, bound = operations.VERBS[verb.value].name, {}
        else:
            try:
                name, bound = op.name, operations.bind(op, args)
            except HoardError as e:
                raise _Positioned(e, verb)
        request = {"op": name, "bucket": bucket, "key": _no_bare(key), "field": field_name, "args": bound}
        if steps:
            request["path"] = [{"key": step.key, "field": step.field} for step in steps]
        return Statement("request", request=request, needs_db=True)


#: How a dotted address is written, said in its refusals.
DOTTED = ('a dotted address names a document\'s store as "Bucket.key.Field", one level deeper as '
          '"Bucket.key.Field.key.Field", such as db["User.jane.Friends.bob.Messages"].list()')


def _dotted_call(address: str, tok: Token, verb: Token, args: list, chain: list) -> Statement:
    """A read of the store a dotted address names, as the guide writes it: ``db["User.jane.Friends"].list()``
    is ``db.User["jane"].Friends.list()``. Its keys are strings (a number's key is written with brackets),
    and it serves reads only: a write names its store with brackets."""
    parts = address.split(".")
    if len(parts) < 3 or len(parts) % 2 == 0 or not all(parts):
        raise _Positioned(InvalidArgumentError(f"{address!r} is no dotted address: {DOTTED}"), tok)
    if chain:
        raise _Positioned(InvalidArgumentError(f"{verb.value}() takes no chained methods"), chain[0].tok)
    op = operations.FIELD_VERBS.get(verb.value)
    if op is None:
        err = unknown_verb(verb.value, operations.FIELD_VERBS)
        raise _Positioned(err, verb)
    bracketed = f'db.{parts[0]}["{parts[1]}"].{parts[2]}' + "".join(
        f'["{parts[i]}"].{parts[i + 1]}' for i in range(3, len(parts), 2))
    if op.write:
        raise _Positioned(InvalidArgumentError(
            f"{verb.value}() writes, and a dotted address is for reads (list, peek, get, length…); write with "
            f"{bracketed}.{verb.value}(...)"), verb)
    try:
        bound = operations.bind(op, args)
    except HoardError as e:
        raise _Positioned(e, verb)
    request = {"op": op.name, "bucket": parts[0], "key": parts[1], "field": parts[2], "args": bound}
    if len(parts) > 3:
        request["path"] = [{"key": parts[i], "field": parts[i + 1]} for i in range(3, len(parts), 2)]
    return Statement("request", request=request, needs_db=True)


class _Step:
    """One ``["bob"].Messages`` after a store field: an element's key and one of its store fields."""

    __slots__ = ("key", "field", "tok")

    def __init__(self, key, field: str, tok: Token):
        self.key, self.field, self.tok = key, field, tok


class _Chained:
    """One ``.method(args)`` after a call: ``.sort({Date: -1})``."""

    __slots__ = ("tok", "args")

    def __init__(self, tok: Token, args: list):
        self.tok, self.args = tok, args


def _apply_chain(request: dict, verb: Token, chain: list) -> dict:
    """A call with cursor methods chained after it, as mongosh writes them:
    ``db.T.find(f).sort({Date: -1}).limit(10)``. The operations table says which verbs take
    them (``Operation.chains``): each option of the verb is a method of one argument
    (``.sort``, ``.limit``, ``.skip``, ``.projection``), and ``chains`` names the methods
    that make it another operation (``.count()``: count what the filter matches, skip and
    limit aside, as mongosh's count; ``.explain()``: search with ``explain: true``).
    """
    op = operations.verb(request["op"])
    if not op.chains:
        raise _Positioned(InvalidArgumentError(
            f"{verb.value}() takes no chained methods; "
            f"{', '.join(sorted(n for n, o in operations.VERBS.items() if o.chains and n == o.name))} do"),
            chain[0].tok)
    args = dict(request["args"])
    for link in chain:
        name = link.tok.value
        becomes = {method: (target, sets) for method, target, sets in op.chains}
        if name in becomes:
            if link.args:
                raise _Positioned(InvalidArgumentError(f".{name}() takes no arguments"), link.tok)
            target, sets = becomes[name]
            op = operations.VERBS[target]
            keep = {p.name for p in op.params + op.options}
            args = {**{k: v for k, v in args.items() if k in keep}, **sets}
            continue
        if op.param(name) is None or name in op.param_names:
            methods = [p.name for p in op.options] + [m for m, _t, _s in op.chains]
            raise _Positioned(InvalidArgumentError(
                f"unknown method .{name}() after {verb.value}(); accepted: "
                f"{', '.join('.' + m + '()' for m in dict.fromkeys(methods))}"), link.tok)
        if len(link.args) != 1:
            raise _Positioned(InvalidArgumentError(f".{name}() takes one argument: {op.param(name).help}"), link.tok)
        args[name] = _no_bare(link.args[0])
    try:
        bound = operations.bind(op, (), args)
    except HoardError as e:
        raise _Positioned(e, chain[-1].tok)
    return {**request, "op": op.name, "args": bound}


def _verb_request(bucket: str, verb: Token, args: list) -> dict:
    if verb.value not in operations.VERBS:
        err = unknown_verb(verb.value, {**operations.VERBS, **BUCKET_METHODS})
        err.called_on = (bucket, None, verb.value)
        raise _Positioned(err, verb)
    try:
        op = operations.verb(verb.value)
        bound = operations.bind(op, args)
    except HoardError as e:
        raise _Positioned(e, verb)
    return {"op": op.name, "bucket": bucket, "args": bound}


def unknown_verb(name: str, known, owner: str | None = None) -> UnknownVerbError:
    """UNKNOWN_VERB for ``name``: the verbs there are (``known``, aliases among them), and the likeliest typo.

    ``owner`` names what the verbs are of (``fifo bucket 'Comments'``); without it they are
    every verb. The error's ``called_on`` (set by the parser) is the ``(bucket, store field,
    verb)`` of the call, so that the shell, which can ask the bucket's type, lists that
    type's verbs only.
    """
    names = sorted(known)
    by_lower = {n.lower(): n for n in names}
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=0.6)
    guess = f"did you mean {by_lower[close[0]]}? " if close else ""
    shown = sorted({n for n in names if "_" in n or n.islower()})  # one spelling each: batch_push, not batchPush
    what = f"verbs of {owner}" if owner else "verbs"
    return UnknownVerbError(f"unknown verb {name!r}; {guess}{what}: {', '.join(shown)} (help VERB describes one)")


_TRANSFORMER = _ToValues()


def _transform(tree, first: Token):
    try:
        return _TRANSFORMER.transform(tree)
    except VisitError as e:
        orig = e.orig_exc
        if isinstance(orig, _Positioned):
            err = _error(type(orig.err), orig.err.message if isinstance(orig.err, HoardError) else str(orig.err),
                         orig.tok or first)
            if hasattr(orig.err, "called_on"):
                err.called_on = orig.err.called_on
            raise err from None
        if isinstance(orig, HoardError):
            raise _error(type(orig), orig.message, first) from None
        # A bug: still an error of this statement (the shell prints it and goes on), never a traceback.
        raise _error(InternalError, f"{type(orig).__name__}: {orig} (please report this)", first) from orig


# ---- the public functions ----------------------------------------------------------------

def statements(text: str) -> Iterator[Statement | HoardError]:
    """Each statement of ``text`` in order, parsed only when asked for.

    A statement that does not parse is yielded as its error (a :class:`SyntaxError_`
    naming line and column, or the refusal of a bad literal, verb or argument), and
    parsing goes on with the next statement.
    """
    driver = _Driver(text)
    while True:
        try:
            parsed = driver.one()
        except HoardError as err:
            yield err
            driver.skip(err)
            continue
        if parsed is None:
            return
        tree, first, last = parsed
        try:
            stmt = _transform(tree, first)
        except HoardError as err:
            yield err
            continue
        if isinstance(stmt, Statement):
            stmt.text = text[first.start_pos:last.end_pos]
            stmt.line, stmt.column = first.line, first.column
        yield stmt


def parse(text: str) -> list[Statement]:
    """Every statement of ``text``; raises the first error."""
    out = []
    for item in statements(text):
        if isinstance(item, HoardError):
            raise item
        out.append(item)
    return out


def parse_statement(text: str) -> Statement:
    """The one statement of ``text``; raises if there is none or more than one."""
    found = parse(text)
    if len(found) != 1:
        raise _error(SyntaxError_, f"expected one statement, found {len(found)}", None)
    return found[0]


def parse_value(text: str) -> Any:
    """The value of one HQL literal, such as ``{Score: {$gte: 90}, At: ISODate("2026-01-01")}``."""
    driver = _Driver(text, start="value")
    parsed = driver.one()
    if parsed is None:
        raise _error(SyntaxError_, "expected a value, found nothing", driver.src.eof, at_end=True)
    rest = driver.src.next()
    while rest.type in ("NL", "SEMI"):
        rest = driver.src.next()
    if rest.type != "$END":
        raise _error(SyntaxError_, f"unexpected {_show_token(rest)} after the value", rest)
    tree, first, _ = parsed
    return _no_bare_top(_transform(tree, first))


def _no_bare_top(value):
    try:
        return _no_bare(value)
    except _Positioned as p:
        raise _error(type(p.err), p.err.message, p.tok) from None


def next_keywords(text: str) -> list[str]:
    """The keywords that may come next at the end of ``text``, lower-case: what completion offers.

    After ``describe`` that is ``bucket``; after ``show``, ``buckets`` and ``databases``; where
    a statement starts, the words a statement starts with; elsewhere none.
    """
    last: Statement | HoardError | None = None
    for last in statements(text):
        pass
    if isinstance(last, HoardError) and getattr(last, "expected", None) is not None:
        expected = last.expected
    elif last is None or text.rstrip(" \t\r").endswith((";", "\n")):
        expected = _Parser("statement").accepts()
    else:
        return []
    return sorted(name.lower() for name in expected
                  if name in KEYWORDS.values() and name not in ("TRUE", "FALSE", "NULL"))


def is_complete(text: str) -> bool:
    """Whether ``text`` can be run as it is: every statement ends, or one clearly cannot.

    The interactive shell keeps reading lines while this is False: an open bracket,
    a bucket body without its ``}``, a call without its ``)``.
    """
    for item in statements(text):
        if isinstance(item, HoardError) and getattr(item, "at_end", False):
            return False
    return True
