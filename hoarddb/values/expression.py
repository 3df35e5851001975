"""Aggregation expressions with MongoDB's meaning: compile an expression once, then evaluate it against documents.

An expression is what ``$expr``, ``$project``, ``$addFields`` and ``$group`` take:

- a field path, ``"$price"`` or ``"$address.city"`` (through arrays it gives an array of
  what each element holds: ``"$items.qty"`` on ``{items: [{qty: 1}, {qty: 2}]}`` is
  ``[1, 2]``; a position is not a path part here, as in MongoDB);
- a variable, ``"$$ROOT"`` (the whole document), ``"$$CURRENT"``, ``"$$NOW"``,
  ``"$$REMOVE"`` (no value: a field set to it is left out), or one bound by ``$let``,
  ``$map`` or ``$filter`` (``"$$item.qty"``);
- an operator, ``{"$add": ["$price", "$tax"]}``, or ``{"$literal": v}`` for a value taken as it is;
- a document of expressions (``{"total": {"$sum": ...}}``) or an array of them;
- any other value, which stands for itself.

A missing field is a value of its own, as in MongoDB: it sorts after MinKey and before
null, so ``{"$eq": ["$missing", null]}`` is false, and most operators answer null for
null or missing. Errors (a string added to a number, a division by zero) raise
BadValueError naming the operator and what it accepts. Pure functions, no I/O.
"""

from __future__ import annotations

import datetime
import decimal
import math
import re
import zoneinfo
from collections.abc import Callable, Mapping

from bson.decimal128 import Decimal128, create_decimal128_context
from bson.int64 import Int64
from bson.min_key import MinKey
from bson.objectid import ObjectId
from bson.timestamp import Timestamp

from hoarddb.errors import BadValueError

from .order import NUMBER, RANK_NAMES, compare, is_nan, number_value, type_rank
from .paths import MISSING

#: The context an evaluation reads: variable name (without ``$$``) -> value; ``CURRENT`` is the document.
Variables = dict
Evaluator = Callable[[Variables], object]

_DECIMAL128_CONTEXT = create_decimal128_context()
_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_UTC = datetime.timezone.utc
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=_UTC)
_SYSTEM_VARIABLES = ("ROOT", "CURRENT", "NOW", "REMOVE")
_NAME = re.compile(r"[a-z][A-Za-z0-9_]*\Z")


# ---------------------------------------------------------------------------
# public


def compile_expression(expr, *, where: str = "expression") -> Callable[..., object]:
    """A function ``(doc, variables=None) -> value`` computing ``expr`` for a document.

    Raises BadValueError up front for an unknown operator, a wrong number of arguments
    or an undefined variable; the function raises BadValueError for a value an operator
    cannot take (``$add`` of a string). The value is :data:`~hoarddb.values.paths.MISSING`
    where the expression reaches nothing (a missing field, ``$$REMOVE``).
    """
    ev = _compile(expr, frozenset(_SYSTEM_VARIABLES), where)

    def evaluate(doc, variables: Mapping | None = None):
        ctx = {"ROOT": doc, "CURRENT": doc}
        if variables:
            ctx.update(variables)
        return ev(ctx)
    evaluate.evaluator = ev
    return evaluate


def compile_evaluator(expr, defined=frozenset(), where: str = "expression") -> Evaluator:
    """The compiled form of ``expr`` as a function of the variables (``CURRENT`` and ``ROOT`` among them);
    ``defined`` names the variables the caller binds besides the system ones."""
    return _compile(expr, frozenset(_SYSTEM_VARIABLES) | frozenset(defined), where)


def truthy(value) -> bool:
    """An expression's value as a condition: false, null, missing and every zero are false, the rest true."""
    if value is MISSING or value is None:
        return False
    if isinstance(value, bool):
        return value
    if type_rank(value) == NUMBER:
        return number_value(value) != 0
    return True


def expression_compare(a, b) -> int:
    """:func:`~hoarddb.values.order.compare`, with a missing value between MinKey and null (MongoDB's rule)."""
    if a is MISSING or b is MISSING:
        if a is b:
            return 0
        if a is MISSING:
            return 1 if isinstance(b, MinKey) else -1
        return -1 if isinstance(a, MinKey) else 1
    return compare(a, b)


def type_name(value) -> str:
    """The BSON type name of a value, as ``$type`` says it (``"int"``, ``"double"``, ``"missing"``)."""
    if value is MISSING:
        return "missing"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, Int64):
        return "long"
    if isinstance(value, int):
        return "int" if _INT32_MIN <= value <= _INT32_MAX else "long"
    if isinstance(value, float):
        return "double"
    if isinstance(value, (Decimal128, decimal.Decimal)):
        return "decimal"
    return RANK_NAMES[type_rank(value)]


def is_expression_operator(name: str) -> bool:
    """Whether ``name`` (such as ``"$add"``) is an operator this module evaluates."""
    return name in _OPERATORS


# ---------------------------------------------------------------------------
# compiling


def _compile(expr, defined: frozenset, where: str) -> Evaluator:
    if isinstance(expr, str) and expr.startswith("$"):
        return _compile_path(expr, defined, where)
    if isinstance(expr, Mapping):
        keys = list(expr)
        if keys and isinstance(keys[0], str) and keys[0].startswith("$"):
            if len(keys) != 1:
                raise BadValueError(
                    f"{where}: an operator expression holds exactly one operator, such as {{'$add': [1, 2]}}; "
                    f"got {len(keys)} fields ({', '.join(map(str, keys))})")
            return _compile_operator(keys[0], expr[keys[0]], defined, where)
        return _compile_object(expr, defined, where)
    if isinstance(expr, (list, tuple)):
        items = [_compile(e, defined, where) for e in expr]
        return lambda ctx: [_present(ev(ctx)) for ev in items]
    value = expr
    return lambda ctx: value


def _present(value):
    """An array element that reached nothing becomes null, as MongoDB writes it."""
    return None if value is MISSING else value


def _compile_object(expr: Mapping, defined, where: str) -> Evaluator:
    fields = []
    for name, sub in expr.items():
        if not isinstance(name, str) or not name or name.startswith("$") or "." in name:
            raise BadValueError(
                f"{where}: field name {name!r} of a document expression may not be empty, begin with '$' "
                "or hold a '.'; to compute a nested field write a nested document")
        fields.append((name, _compile(sub, defined, where)))

    def obj(ctx):
        out = {}
        for name, ev in fields:
            v = ev(ctx)
            if v is not MISSING:
                out[name] = v
        return out
    return obj


def _compile_path(text: str, defined, where: str) -> Evaluator:
    if text.startswith("$$"):
        name, _, rest = text[2:].partition(".")
        if name not in defined:
            raise BadValueError(
                f"{where}: use of undefined variable {text!r}; defined here: "
                f"{', '.join('$$' + d for d in sorted(defined))}")
        if name == "REMOVE":
            return lambda ctx: MISSING
        if name == "NOW":
            parts = tuple(rest.split(".")) if rest else ()
            return lambda ctx: _walk(ctx.get("NOW") or _now(), parts, 0)
        parts = tuple(rest.split(".")) if rest else ()
        if "" in parts:
            raise BadValueError(f"{where}: {text!r} has an empty part")
        return lambda ctx: _walk(ctx[name], parts, 0)
    path = text[1:]
    if not path or "" in path.split(".") or "$" in path:
        raise BadValueError(
            f"{where}: {text!r} is not a field path; a field path is '$' and a dotted name such as '$a.b'")
    parts = tuple(path.split("."))
    if len(parts) == 1:
        name = parts[0]

        def one(ctx):
            cur = ctx["CURRENT"]
            return cur.get(name, MISSING) if isinstance(cur, Mapping) else MISSING
        return one
    return lambda ctx: _walk(ctx["CURRENT"], parts, 0)


def _now() -> datetime.datetime:
    now = datetime.datetime.now(_UTC)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


def _walk(value, parts, i):
    """What a field path reaches from ``value``: through arrays, the array of what each element holds."""
    n = len(parts)
    while i < n:
        if isinstance(value, Mapping):
            value = value.get(parts[i], MISSING)
            if value is MISSING:
                return MISSING
            i += 1
        elif isinstance(value, (list, tuple)):
            out = []
            for e in value:
                if isinstance(e, (Mapping, list, tuple)):
                    r = _walk(e, parts, i)
                    if r is not MISSING:
                        out.append(r)
            return out
        else:
            return MISSING
    return value


def _compile_operator(op: str, arg, defined, where: str) -> Evaluator:
    spec = _OPERATORS.get(op)
    if spec is None:
        raise BadValueError(
            f"{where}: unknown expression operator {op!r}; accepted: {', '.join(sorted(_OPERATORS))}")
    return spec(op, arg, defined, where)


def _args(op, arg, defined, where, low: int, high: int | None) -> list[Evaluator]:
    """Compile the argument list of an operator taking ``low``..``high`` arguments (a lone value is one)."""
    items = list(arg) if isinstance(arg, (list, tuple)) else [arg]
    if len(items) < low or (high is not None and len(items) > high):
        count = f"{low}" if low == high else f"{low} to {high}" if high is not None else f"at least {low}"
        raise BadValueError(f"{where}: {op} takes {count} argument(s), got {len(items)}")
    return [_compile(a, defined, where) for a in items]


def _named_args(op, arg, defined, where, required: tuple, optional: tuple) -> dict:
    if not isinstance(arg, Mapping):
        raise BadValueError(f"{where}: {op} takes a document with {', '.join(required + optional)}")
    unknown = [k for k in arg if k not in required + optional]
    if unknown:
        raise BadValueError(
            f"{where}: {op} does not take {unknown[0]!r}; accepted: {', '.join(required + optional)}")
    missing = [k for k in required if k not in arg]
    if missing:
        raise BadValueError(f"{where}: {op} needs {missing[0]!r}")
    return {k: _compile(v, defined, where) for k, v in arg.items() if k not in ("as",)}


def _nullish(v) -> bool:
    return v is None or v is MISSING


def _shown(v) -> str:
    return f"{type_name(v)} {v!r:.40}"


# ---------------------------------------------------------------------------
# numbers


def number_kind(v) -> int:
    """A number's result kind, 0 int, 1 long, 2 double, 3 decimal: the widest of the operands is the result's type."""
    if isinstance(v, (Decimal128, decimal.Decimal)):
        return 3
    if isinstance(v, float):
        return 2
    if isinstance(v, Int64) or not _INT32_MIN <= v <= _INT32_MAX:
        return 1
    return 0


def is_number(v) -> bool:
    """True for a number (bool, null and missing are not)."""
    return not isinstance(v, bool) and v is not MISSING and v is not None and type_rank(v) == NUMBER


def _to_decimal(v) -> decimal.Decimal:
    if isinstance(v, Decimal128):
        return v.to_decimal()
    if isinstance(v, decimal.Decimal):
        return v
    if isinstance(v, float):
        return decimal.Decimal(repr(v)) if math.isfinite(v) else decimal.Decimal(v)
    return decimal.Decimal(int(v))


def _make(kind: int, value):
    """A result of kind ``kind`` (an int past int64 becomes a double, as MongoDB's long overflow)."""
    if kind == 3:
        with decimal.localcontext(_DECIMAL128_CONTEXT) as ctx:
            return Decimal128(ctx.create_decimal(value))
    if kind == 2:
        return float(value)
    value = int(value)
    if not _INT64_MIN <= value <= _INT64_MAX:
        return float(value)
    if kind == 1:
        return Int64(value)
    return value


def arith(kind: int, fn, *nums):
    """``fn`` of numbers computed as kind ``kind`` (number_kind) and made a value of that kind."""
    if kind == 3:
        with decimal.localcontext(_DECIMAL128_CONTEXT):
            return _make(3, fn(*[_to_decimal(n) for n in nums]))
    if kind == 2:
        return fn(*[float(number_value(n)) for n in nums])
    return _make(kind, fn(*[int(n) for n in nums]))


def _numbers(op, values, dates_ok=False):
    for v in values:
        if not is_number(v) and not (dates_ok and _is_date(v)):
            accepted = "numbers or a date" if dates_ok else "numbers"
            raise BadValueError(f"{op} takes {accepted}, got {_shown(v)}")


def _is_date(v) -> bool:
    return isinstance(v, datetime.datetime)


def _op_add(op, arg, defined, where):
    items = _args(op, arg, defined, where, 0, None)

    def add(ctx):
        values = [ev(ctx) for ev in items]
        if any(_nullish(v) for v in values):
            return None
        _numbers(op, values, dates_ok=True)
        dates = [v for v in values if _is_date(v)]
        nums = [v for v in values if not _is_date(v)]
        if len(dates) > 1:
            raise BadValueError(f"{op} takes one date at most")
        kind = max((number_kind(n) for n in nums), default=0)
        total = arith(kind, lambda *xs: sum(xs[1:], xs[0]), *nums) if nums else 0
        if dates:
            ms = round(float(number_value(total))) if kind >= 2 else int(total)
            return dates[0] + datetime.timedelta(milliseconds=ms)
        return total
    return add


def _op_subtract(op, arg, defined, where):
    a, b = _args(op, arg, defined, where, 2, 2)

    def subtract(ctx):
        x, y = a(ctx), b(ctx)
        if _nullish(x) or _nullish(y):
            return None
        if _is_date(x) and _is_date(y):
            return Int64(_date_ms(x) - _date_ms(y))
        if _is_date(x) and is_number(y):
            return x - datetime.timedelta(milliseconds=round(float(number_value(y))))
        _numbers(op, (x, y))
        return arith(max(number_kind(x), number_kind(y)), lambda p, q: p - q, x, y)
    return subtract


def _op_multiply(op, arg, defined, where):
    items = _args(op, arg, defined, where, 0, None)

    def multiply(ctx):
        values = [ev(ctx) for ev in items]
        if any(_nullish(v) for v in values):
            return None
        _numbers(op, values)
        if not values:
            return 1
        kind = max(number_kind(n) for n in values)

        def product(*xs):
            out = xs[0]
            for x in xs[1:]:
                out = out * x
            return out
        return arith(kind, product, *values)
    return multiply


def _op_divide(op, arg, defined, where):
    a, b = _args(op, arg, defined, where, 2, 2)

    def divide(ctx):
        x, y = a(ctx), b(ctx)
        if _nullish(x) or _nullish(y):
            return None
        _numbers(op, (x, y))
        if number_value(y) == 0:
            raise BadValueError(f"{op}: can't divide by zero")
        if max(number_kind(x), number_kind(y)) == 3:
            return arith(3, lambda p, q: p / q, x, y)
        return float(number_value(x)) / float(number_value(y))
    return divide


def _op_mod(op, arg, defined, where):
    a, b = _args(op, arg, defined, where, 2, 2)

    def mod(ctx):
        x, y = a(ctx), b(ctx)
        if _nullish(x) or _nullish(y):
            return None
        _numbers(op, (x, y))
        if number_value(y) == 0:
            raise BadValueError(f"{op}: can't take the remainder of a division by zero")
        kind = max(number_kind(x), number_kind(y))
        if kind == 3:
            return arith(3, lambda p, q: p % q, x, y)  # Decimal's % keeps the dividend's sign
        if kind == 2:
            return math.fmod(float(number_value(x)), float(number_value(y)))
        p, q = int(x), int(y)
        r = abs(p) % abs(q)
        return _make(kind, -r if p < 0 else r)
    return mod


def _unary_math(fn, *, domain=None, keep_int=False):
    def build(op, arg, defined, where):
        (a,) = _args(op, arg, defined, where, 1, 1)

        def unary(ctx):
            x = a(ctx)
            if _nullish(x):
                return None
            _numbers(op, (x,))
            if domain is not None and not is_nan(x) and not domain(number_value(x)):
                raise BadValueError(f"{op}: {x!r} is outside the values it takes")
            kind = number_kind(x)
            if keep_int and kind <= 1:
                return _make(kind, fn(int(x)))
            if kind == 3:
                with decimal.localcontext(_DECIMAL128_CONTEXT):
                    return _make(3, fn(_to_decimal(x)))
            return float(fn(float(number_value(x))))
        return unary
    return build


def _dec_or_float(fn_float, fn_dec):
    def fn(x):
        return fn_dec(x) if isinstance(x, decimal.Decimal) else fn_float(x)
    return fn


def _floor(x):
    if isinstance(x, decimal.Decimal):
        return x.to_integral_value(rounding=decimal.ROUND_FLOOR)
    if isinstance(x, int):
        return x
    return float(math.floor(x)) if math.isfinite(x) else x


def _ceil(x):
    if isinstance(x, decimal.Decimal):
        return x.to_integral_value(rounding=decimal.ROUND_CEILING)
    if isinstance(x, int):
        return x
    return float(math.ceil(x)) if math.isfinite(x) else x


def _round_like(op, arg, defined, where, rounding):
    items = _args(op, arg, defined, where, 1, 2)

    def rnd(ctx):
        x = items[0](ctx)
        place = items[1](ctx) if len(items) > 1 else 0
        if _nullish(x) or _nullish(place):
            return None
        _numbers(op, (x, place))
        if number_value(place) != int(number_value(place)) or not -20 < int(number_value(place)) < 100:
            raise BadValueError(f"{op}: the place must be a whole number between -20 and 100, got {place!r}")
        place = int(number_value(place))
        if is_nan(x) or (isinstance(x, float) and not math.isfinite(x)):
            return x
        kind = number_kind(x)
        q = decimal.Decimal(1).scaleb(-place)
        d = _to_decimal(x)
        with decimal.localcontext(_DECIMAL128_CONTEXT):
            r = d.quantize(q, rounding=rounding) if place >= 0 else \
                (d.scaleb(place).quantize(decimal.Decimal(1), rounding=rounding)).scaleb(-place)
        if kind == 3:
            return _make(3, r)
        if kind == 2:
            return float(r)
        return _make(kind, int(r))
    return rnd


def _op_pow(op, arg, defined, where):
    a, b = _args(op, arg, defined, where, 2, 2)

    def power(ctx):
        x, y = a(ctx), b(ctx)
        if _nullish(x) or _nullish(y):
            return None
        _numbers(op, (x, y))
        if number_value(x) == 0 and number_value(y) < 0:
            raise BadValueError(f"{op}: 0 cannot be raised to a negative power")
        kind = max(number_kind(x), number_kind(y))
        if kind <= 1 and int(y) >= 0:
            return _make(kind, int(x) ** int(y))
        if kind <= 1:
            return float(int(x)) ** int(y)
        if kind == 3:
            return arith(3, lambda p, q: p ** q, x, y)
        try:
            return float(number_value(x)) ** float(number_value(y))
        except OverflowError:
            return math.inf
    return power


def _op_log(op, arg, defined, where):
    a, b = _args(op, arg, defined, where, 2, 2)

    def log(ctx):
        x, base = a(ctx), b(ctx)
        if _nullish(x) or _nullish(base):
            return None
        _numbers(op, (x, base))
        if number_value(x) <= 0 or number_value(base) <= 0 or number_value(base) == 1:
            raise BadValueError(f"{op} takes a positive number and a positive base other than 1")
        return math.log(float(number_value(x)), float(number_value(base)))
    return log


# ---------------------------------------------------------------------------
# strings


def _string_of(op, v, *, null_as: str | None = None) -> str | None:
    if _nullish(v):
        return null_as
    if isinstance(v, str):
        return str(v)
    raise BadValueError(f"{op} takes strings, got {_shown(v)}")


def _op_concat(op, arg, defined, where):
    items = _args(op, arg, defined, where, 0, None)

    def concat(ctx):
        values = [ev(ctx) for ev in items]
        if any(_nullish(v) for v in values):
            return None
        return "".join(_string_of(op, v) for v in values)
    return concat


def _case(fn):
    def build(op, arg, defined, where):
        (a,) = _args(op, arg, defined, where, 1, 1)

        def case(ctx):
            v = a(ctx)
            if _nullish(v):
                return ""
            if is_number(v) or _is_date(v):
                return fn(_to_string(op, v))
            return fn(_string_of(op, v))
        return case
    return build


def _op_substr_cp(op, arg, defined, where):
    s, start, length = _args(op, arg, defined, where, 3, 3)

    def substr(ctx):
        text = _string_of(op, s(ctx), null_as="")
        i, n = start(ctx), length(ctx)
        _numbers(op, (i, n))
        i, n = int(number_value(i)), int(number_value(n))
        if i < 0:
            raise BadValueError(f"{op}: the starting index must be >= 0, got {i}")
        return text[i:] if n < 0 else text[i:i + n]
    return substr


def _op_substr_bytes(op, arg, defined, where):
    s, start, length = _args(op, arg, defined, where, 3, 3)

    def substr(ctx):
        data = _string_of(op, s(ctx), null_as="").encode()
        i, n = start(ctx), length(ctx)
        _numbers(op, (i, n))
        i, n = int(number_value(i)), int(number_value(n))
        if i < 0:
            raise BadValueError(f"{op}: the starting index must be >= 0, got {i}")
        part = data[i:] if n < 0 else data[i:i + n]
        try:
            return part.decode()
        except UnicodeDecodeError:
            raise BadValueError(f"{op}: the range falls inside a UTF-8 character; use $substrCP") from None
    return substr


def _op_strlen(by_bytes: bool):
    def build(op, arg, defined, where):
        (a,) = _args(op, arg, defined, where, 1, 1)

        def strlen(ctx):
            v = a(ctx)
            if not isinstance(v, str):
                raise BadValueError(f"{op} takes a string, got {_shown(v) if v is not MISSING else 'missing'}")
            return len(v.encode()) if by_bytes else len(v)
        return strlen
    return build


def _op_split(op, arg, defined, where):
    s, d = _args(op, arg, defined, where, 2, 2)

    def split(ctx):
        text, delim = s(ctx), d(ctx)
        if _nullish(text):
            return None
        text, delim = _string_of(op, text), _string_of(op, delim)
        if delim is None or delim == "":
            raise BadValueError(f"{op} needs a non-empty delimiter")
        return text.split(delim)
    return split


def _op_trim(side: str):
    def build(op, arg, defined, where):
        spec = _named_args(op, arg, defined, where, ("input",), ("chars",))

        def trim(ctx):
            text = spec["input"](ctx)
            if _nullish(text):
                return None
            text = _string_of(op, text)
            chars = spec["chars"](ctx) if "chars" in spec else None
            chars = None if _nullish(chars) else _string_of(op, chars)
            if chars is None:
                chars = " \t\n\r\x0b\x0c\x00\u00a0\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
            if side == "both":
                return text.strip(chars)
            return text.lstrip(chars) if side == "left" else text.rstrip(chars)
        return trim
    return build


def _op_index_of_cp(op, arg, defined, where):
    items = _args(op, arg, defined, where, 2, 4)

    def index_of(ctx):
        values = [ev(ctx) for ev in items]
        if _nullish(values[0]):
            return None
        text, sub = _string_of(op, values[0]), _string_of(op, values[1])
        if sub is None:
            raise BadValueError(f"{op} needs a substring to look for")
        _numbers(op, values[2:])
        start = int(number_value(values[2])) if len(values) > 2 else 0
        end = int(number_value(values[3])) if len(values) > 3 else len(text)
        if start < 0 or end < 0:
            raise BadValueError(f"{op}: start and end must be >= 0")
        return text.find(sub, start, end)
    return index_of


def _op_strcasecmp(op, arg, defined, where):
    a, b = _args(op, arg, defined, where, 2, 2)

    def strcasecmp(ctx):
        x = _to_string(op, a(ctx)).upper()
        y = _to_string(op, b(ctx)).upper()
        return (x > y) - (x < y)
    return strcasecmp


def _to_string(op, v) -> str:
    if _nullish(v):
        return ""
    if isinstance(v, str):
        return str(v)
    if isinstance(v, bool):
        return "true" if v else "false"
    if is_number(v):
        if isinstance(v, float):
            if math.isnan(v):
                return "NaN"
            if math.isinf(v):
                return "Infinity" if v > 0 else "-Infinity"
            return repr(int(v)) if v == int(v) and abs(v) < 1e15 else repr(v)
        return str(number_value(v)) if isinstance(v, (Decimal128, decimal.Decimal)) else str(int(v))
    if _is_date(v):
        return _format_date(v, "%Y-%m-%dT%H:%M:%S.%LZ", _UTC, op)
    if isinstance(v, ObjectId):
        return str(v)
    raise BadValueError(f"{op} cannot convert {_shown(v)} to a string")


# ---------------------------------------------------------------------------
# comparisons, booleans, conditions


def _op_compare(op, arg, defined, where):
    a, b = _args(op, arg, defined, where, 2, 2)
    test = {"$eq": lambda c: c == 0, "$ne": lambda c: c != 0, "$gt": lambda c: c > 0,
            "$gte": lambda c: c >= 0, "$lt": lambda c: c < 0, "$lte": lambda c: c <= 0}.get(op)
    if test is None:  # $cmp
        return lambda ctx: expression_compare(a(ctx), b(ctx))
    return lambda ctx: test(expression_compare(a(ctx), b(ctx)))


def _op_and(op, arg, defined, where):
    items = _args(op, arg, defined, where, 0, None)
    if op == "$and":
        return lambda ctx: all(truthy(ev(ctx)) for ev in items)
    return lambda ctx: any(truthy(ev(ctx)) for ev in items)


def _op_not(op, arg, defined, where):
    (a,) = _args(op, arg, defined, where, 1, 1)
    return lambda ctx: not truthy(a(ctx))


def _op_cond(op, arg, defined, where):
    if isinstance(arg, Mapping):
        spec = _named_args(op, arg, defined, where, ("if", "then", "else"), ())
        test, yes, no = spec["if"], spec["then"], spec["else"]
    else:
        test, yes, no = _args(op, arg, defined, where, 3, 3)
    return lambda ctx: yes(ctx) if truthy(test(ctx)) else no(ctx)


def _op_if_null(op, arg, defined, where):
    items = _args(op, arg, defined, where, 2, None)

    def if_null(ctx):
        for ev in items[:-1]:
            v = ev(ctx)
            if not _nullish(v):
                return v
        return items[-1](ctx)
    return if_null


def _op_switch(op, arg, defined, where):
    if not isinstance(arg, Mapping) or not isinstance(arg.get("branches"), (list, tuple)) or not arg["branches"]:
        raise BadValueError(f"{where}: $switch takes {{branches: [{{case, then}}, ...], default}}")
    branches = []
    for b in arg["branches"]:
        spec = _named_args(op, b, defined, where, ("case", "then"), ())
        branches.append((spec["case"], spec["then"]))
    unknown = [k for k in arg if k not in ("branches", "default")]
    if unknown:
        raise BadValueError(f"{where}: $switch does not take {unknown[0]!r}; accepted: branches, default")
    default = _compile(arg["default"], defined, where) if "default" in arg else None

    def switch(ctx):
        for case, then in branches:
            if truthy(case(ctx)):
                return then(ctx)
        if default is None:
            raise BadValueError("$switch: no branch matched and there is no default")
        return default(ctx)
    return switch


# ---------------------------------------------------------------------------
# arrays, types, variables


def _array_of(op, v):
    if not isinstance(v, (list, tuple)):
        raise BadValueError(f"{op} takes an array, got {_shown(v) if v is not MISSING else 'missing'}")
    return v


def _op_size(op, arg, defined, where):
    (a,) = _args(op, arg, defined, where, 1, 1)
    return lambda ctx: len(_array_of(op, a(ctx)))


def _op_array_elem_at(op, arg, defined, where):
    a, i = _args(op, arg, defined, where, 2, 2)

    def elem_at(ctx):
        array, idx = a(ctx), i(ctx)
        if _nullish(array) or _nullish(idx):
            return None
        array = _array_of(op, array)
        _numbers(op, (idx,))
        idx = int(number_value(idx))
        if -len(array) <= idx < len(array):
            return array[idx]
        return MISSING
    return elem_at


def _op_first_last(op, arg, defined, where):
    (a,) = _args(op, arg, defined, where, 1, 1)

    def first_last(ctx):
        array = a(ctx)
        if _nullish(array):
            return None
        array = _array_of(op, array)
        if not array:
            return MISSING
        return array[0] if op == "$first" else array[-1]
    return first_last


def _op_concat_arrays(op, arg, defined, where):
    items = _args(op, arg, defined, where, 0, None)

    def concat(ctx):
        values = [ev(ctx) for ev in items]
        if any(_nullish(v) for v in values):
            return None
        out = []
        for v in values:
            out.extend(_array_of(op, v))
        return out
    return concat


def _op_in(op, arg, defined, where):
    x, a = _args(op, arg, defined, where, 2, 2)

    def is_in(ctx):
        value, array = x(ctx), _array_of(op, a(ctx))
        return any(expression_compare(value, e) == 0 for e in array)
    return is_in


def _op_is_array(op, arg, defined, where):
    (a,) = _args(op, arg, defined, where, 1, 1)
    return lambda ctx: isinstance(a(ctx), (list, tuple))


def _op_reverse(op, arg, defined, where):
    (a,) = _args(op, arg, defined, where, 1, 1)

    def reverse(ctx):
        v = a(ctx)
        return None if _nullish(v) else list(reversed(_array_of(op, v)))
    return reverse


def _op_slice(op, arg, defined, where):
    items = _args(op, arg, defined, where, 2, 3)

    def slice_(ctx):
        values = [ev(ctx) for ev in items]
        if any(_nullish(v) for v in values):
            return None
        array = _array_of(op, values[0])
        _numbers(op, values[1:])
        if len(values) == 2:
            n = int(number_value(values[1]))
            return list(array[:n]) if n >= 0 else list(array[n:])
        pos, n = int(number_value(values[1])), int(number_value(values[2]))
        if n <= 0:
            raise BadValueError(f"{op}: the number of elements must be positive, got {n}")
        if pos < 0:
            pos = max(len(array) + pos, 0)
        return list(array[pos:pos + n])
    return slice_


def _bound_name(op, arg, where) -> str:
    name = arg.get("as", "this") if isinstance(arg, Mapping) else "this"
    if not isinstance(name, str) or not _NAME.match(name):
        raise BadValueError(f"{where}: {op}'s 'as' must be a variable name starting with a lowercase letter")
    return name


def _op_map_filter(op, arg, defined, where):
    name = _bound_name(op, arg, where)
    body_name = "in" if op == "$map" else "cond"
    optional = ("as", "limit") if op == "$filter" else ("as",)
    if not isinstance(arg, Mapping):
        raise BadValueError(f"{where}: {op} takes {{input, as, {body_name}}}")
    for k in arg:
        if k not in ("input", body_name) + optional:
            raise BadValueError(f"{where}: {op} does not take {k!r}; accepted: input, {body_name}, {', '.join(optional)}")
    if "input" not in arg or body_name not in arg:
        raise BadValueError(f"{where}: {op} needs input and {body_name}")
    source = _compile(arg["input"], defined, where)
    body = _compile(arg[body_name], defined | {name}, where)
    limit = _compile(arg["limit"], defined, where) if "limit" in arg else None

    def run(ctx):
        array = source(ctx)
        if _nullish(array):
            return None
        array = _array_of(op, array)
        inner = dict(ctx)
        out = []
        most = None
        if limit is not None:
            most = limit(ctx)
            most = None if _nullish(most) else int(number_value(most))
        for e in array:
            inner[name] = e
            if op == "$map":
                out.append(_present(body(inner)))
            elif truthy(body(inner)):
                out.append(e)
                if most is not None and len(out) >= most:
                    break
        return out
    return run


def _op_let(op, arg, defined, where):
    if not isinstance(arg, Mapping) or set(arg) != {"vars", "in"} or not isinstance(arg["vars"], Mapping):
        raise BadValueError(f"{where}: $let takes {{vars: {{name: expression}}, in: expression}}")
    bound = []
    for name, sub in arg["vars"].items():
        if not isinstance(name, str) or not _NAME.match(name):
            raise BadValueError(f"{where}: $let variable {name!r} must start with a lowercase letter")
        bound.append((name, _compile(sub, defined, where)))
    body = _compile(arg["in"], defined | {n for n, _ in bound}, where)

    def let(ctx):
        inner = dict(ctx)
        for n, ev in bound:
            inner[n] = ev(ctx)
        return body(inner)
    return let


def _op_literal(op, arg, defined, where):
    return lambda ctx: arg


def _op_type(op, arg, defined, where):
    (a,) = _args(op, arg, defined, where, 1, 1)
    return lambda ctx: type_name(a(ctx))


def _op_convert(target: str):
    def build(op, arg, defined, where):
        (a,) = _args(op, arg, defined, where, 1, 1)

        def convert(ctx):
            v = a(ctx)
            if _nullish(v):
                return None
            return _convert(op, v, target)
        return convert
    return build


def _convert(op, v, target):
    if target == "string":
        return _to_string(op, v)
    if target == "bool":
        return truthy(v)
    if isinstance(v, bool):
        n = int(v)
    elif is_number(v):
        n = number_value(v)
    elif isinstance(v, str):
        try:
            n = int(v) if target in ("int", "long") else decimal.Decimal(v)
        except (ValueError, decimal.InvalidOperation):
            raise BadValueError(f"{op}: cannot convert the string {v!r:.40} to a number") from None
    elif _is_date(v) and target in ("long", "double", "decimal"):
        n = _date_ms(v)
    else:
        raise BadValueError(f"{op} cannot convert {_shown(v)}")
    if target == "double":
        return float(n)
    if target == "decimal":
        return _make(3, _to_decimal(n) if not isinstance(n, decimal.Decimal) else n)
    if isinstance(n, float) and not math.isfinite(n) or isinstance(n, decimal.Decimal) and not n.is_finite():
        raise BadValueError(f"{op} cannot convert {v!r} to a whole number")
    n = int(n)
    lo, hi = (_INT32_MIN, _INT32_MAX) if target == "int" else (_INT64_MIN, _INT64_MAX)
    if not lo <= n <= hi:
        raise BadValueError(f"{op}: {v!r} is out of the range of {target}")
    return Int64(n) if target == "long" else n


# ---------------------------------------------------------------------------
# dates


def _date_ms(d: datetime.datetime) -> int:
    if d.tzinfo is None:
        d = d.replace(tzinfo=_UTC)
    delta = d - _EPOCH
    return delta.days * 86_400_000 + delta.seconds * 1000 + delta.microseconds // 1000


_OFFSET = re.compile(r"([+-])(\d\d):?(\d\d)?\Z")


def _zone(op, name):
    if _nullish(name):
        return _UTC
    if not isinstance(name, str):
        raise BadValueError(f"{op}: timezone must be a string such as 'Europe/Oslo' or '+02:00'")
    if name in ("UTC", "Z", "GMT"):
        return _UTC
    m = _OFFSET.match(name)
    if m:
        sign = -1 if m.group(1) == "-" else 1
        return datetime.timezone(sign * datetime.timedelta(hours=int(m.group(2)), minutes=int(m.group(3) or 0)))
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise BadValueError(f"{op}: unrecognized time zone {name!r}; use an Olson name or an offset such as '+02:00'") \
            from None


def _as_date(op, v) -> datetime.datetime:
    if _is_date(v):
        return v if v.tzinfo is not None else v.replace(tzinfo=_UTC)
    if isinstance(v, ObjectId):
        return v.generation_time
    if isinstance(v, Timestamp):
        return datetime.datetime.fromtimestamp(v.time, _UTC)
    raise BadValueError(f"{op} takes a date, got {_shown(v)}")


def _date_arg(op, arg, defined, where):
    if isinstance(arg, Mapping) and "date" in arg:
        spec = _named_args(op, arg, defined, where, ("date",), ("timezone",))
        return spec["date"], spec.get("timezone")
    (a,) = _args(op, arg, defined, where, 1, 1)
    return a, None


def _date_part(part):
    def build(op, arg, defined, where):
        date, zone = _date_arg(op, arg, defined, where)

        def date_part(ctx):
            v = date(ctx)
            if _nullish(v):
                return None
            d = _as_date(op, v).astimezone(_zone(op, zone(ctx) if zone else None))
            return part(d)
        return date_part
    return build


def _week(d: datetime.datetime) -> int:
    """%U: the week of the year, weeks starting on Sunday, days before the first Sunday in week 0."""
    return int(d.strftime("%U"))


def _format_date(d: datetime.datetime, fmt: str, zone, op: str) -> str:
    d = d.astimezone(zone)
    out = []
    i = 0
    while i < len(fmt):
        c = fmt[i]
        if c != "%":
            out.append(c)
            i += 1
            continue
        if i + 1 >= len(fmt):
            raise BadValueError(f"{op}: the format ends with a lone '%'")
        spec = fmt[i + 1]
        i += 2
        if spec == "Y":
            out.append(f"{d.year:04d}")
        elif spec == "m":
            out.append(f"{d.month:02d}")
        elif spec == "d":
            out.append(f"{d.day:02d}")
        elif spec == "H":
            out.append(f"{d.hour:02d}")
        elif spec == "M":
            out.append(f"{d.minute:02d}")
        elif spec == "S":
            out.append(f"{d.second:02d}")
        elif spec == "L":
            out.append(f"{d.microsecond // 1000:03d}")
        elif spec == "j":
            out.append(f"{d.timetuple().tm_yday:03d}")
        elif spec == "w":
            out.append(str(d.isoweekday() % 7 + 1))
        elif spec == "u":
            out.append(str(d.isoweekday()))
        elif spec == "U":
            out.append(f"{_week(d):02d}")
        elif spec == "V":
            out.append(f"{d.isocalendar()[1]:02d}")
        elif spec == "G":
            out.append(f"{d.isocalendar()[0]:04d}")
        elif spec == "z":
            offset = d.utcoffset() or datetime.timedelta(0)
            minutes = int(offset.total_seconds() // 60)
            sign = "-" if minutes < 0 else "+"
            out.append(f"{sign}{abs(minutes) // 60:02d}{abs(minutes) % 60:02d}")
        elif spec == "Z":
            offset = d.utcoffset() or datetime.timedelta(0)
            out.append(str(int(offset.total_seconds() // 60)))
        elif spec == "%":
            out.append("%")
        else:
            raise BadValueError(
                f"{op}: invalid format character %{spec}; accepted: %Y %m %d %H %M %S %L %j %w %u %U %V %G %z %Z %%")
    return "".join(out)


def _op_date_to_string(op, arg, defined, where):
    spec = _named_args(op, arg, defined, where, ("date",), ("format", "timezone", "onNull"))
    fmt_arg = arg.get("format", "%Y-%m-%dT%H:%M:%S.%LZ")
    if isinstance(fmt_arg, str) and not fmt_arg.startswith("$"):
        _format_date(_EPOCH, fmt_arg, _UTC, op)  # refuses a bad format up front

    def date_to_string(ctx):
        v = spec["date"](ctx)
        if _nullish(v):
            return spec["onNull"](ctx) if "onNull" in spec else None
        fmt = spec["format"](ctx) if "format" in spec else "%Y-%m-%dT%H:%M:%S.%LZ"
        if not isinstance(fmt, str):
            raise BadValueError(f"{op}: format must be a string")
        zone = _zone(op, spec["timezone"](ctx) if "timezone" in spec else None)
        return _format_date(_as_date(op, v), fmt, zone, op)
    return date_to_string


# ---------------------------------------------------------------------------
# the table


_OPERATORS: dict[str, Callable] = {
    "$add": _op_add, "$subtract": _op_subtract, "$multiply": _op_multiply, "$divide": _op_divide,
    "$mod": _op_mod,
    "$abs": _unary_math(abs, keep_int=True),
    "$ceil": _unary_math(_ceil, keep_int=True),
    "$floor": _unary_math(_floor, keep_int=True),
    "$sqrt": _unary_math(_dec_or_float(math.sqrt, lambda d: d.sqrt()), domain=lambda x: x >= 0),
    "$exp": _unary_math(_dec_or_float(math.exp, lambda d: d.exp())),
    "$ln": _unary_math(_dec_or_float(math.log, lambda d: d.ln()), domain=lambda x: x > 0),
    "$log10": _unary_math(_dec_or_float(math.log10, lambda d: d.log10()), domain=lambda x: x > 0),
    "$log": _op_log, "$pow": _op_pow,
    "$round": lambda op, arg, d, w: _round_like(op, arg, d, w, decimal.ROUND_HALF_EVEN),
    "$trunc": lambda op, arg, d, w: _round_like(op, arg, d, w, decimal.ROUND_DOWN),
    "$concat": _op_concat, "$toLower": _case(str.lower), "$toUpper": _case(str.upper),
    "$substr": _op_substr_bytes, "$substrBytes": _op_substr_bytes, "$substrCP": _op_substr_cp,
    "$strLenCP": _op_strlen(False), "$strLenBytes": _op_strlen(True), "$split": _op_split,
    "$trim": _op_trim("both"), "$ltrim": _op_trim("left"), "$rtrim": _op_trim("right"),
    "$indexOfCP": _op_index_of_cp, "$strcasecmp": _op_strcasecmp,
    "$eq": _op_compare, "$ne": _op_compare, "$gt": _op_compare, "$gte": _op_compare,
    "$lt": _op_compare, "$lte": _op_compare, "$cmp": _op_compare,
    "$and": _op_and, "$or": _op_and, "$not": _op_not,
    "$cond": _op_cond, "$ifNull": _op_if_null, "$switch": _op_switch,
    "$size": _op_size, "$arrayElemAt": _op_array_elem_at, "$first": _op_first_last, "$last": _op_first_last,
    "$concatArrays": _op_concat_arrays, "$in": _op_in, "$isArray": _op_is_array,
    "$reverseArray": _op_reverse, "$slice": _op_slice, "$map": _op_map_filter, "$filter": _op_map_filter,
    "$let": _op_let, "$literal": _op_literal, "$type": _op_type,
    "$toString": _op_convert("string"), "$toInt": _op_convert("int"), "$toLong": _op_convert("long"),
    "$toDouble": _op_convert("double"), "$toDecimal": _op_convert("decimal"), "$toBool": _op_convert("bool"),
    "$year": _date_part(lambda d: d.year), "$month": _date_part(lambda d: d.month),
    "$dayOfMonth": _date_part(lambda d: d.day), "$hour": _date_part(lambda d: d.hour),
    "$minute": _date_part(lambda d: d.minute), "$second": _date_part(lambda d: d.second),
    "$millisecond": _date_part(lambda d: d.microsecond // 1000),
    "$dayOfWeek": _date_part(lambda d: d.isoweekday() % 7 + 1),
    "$dayOfYear": _date_part(lambda d: d.timetuple().tm_yday),
    "$week": _date_part(_week),
    "$isoWeek": _date_part(lambda d: d.isocalendar()[1]),
    "$isoWeekYear": _date_part(lambda d: d.isocalendar()[0]),
    "$isoDayOfWeek": _date_part(lambda d: d.isoweekday()),
    "$dateToString": _op_date_to_string,
}

#: Every expression operator, sorted (for messages and docs).
EXPRESSION_OPERATORS = tuple(sorted(_OPERATORS))
