"""HQL, the language of hoardDB's shell: the grammar, the parser to operations, and the printer of results.

    >>> from hoarddb.hql import parse_statement, parse_value, format_value
    >>> parse_statement('db.Comments.peek(5)').to_request("app")
    {'op': 'peek', 'db': 'app', 'bucket': 'Comments', 'args': {'limit': 5}}
    >>> format_value(parse_value('{Score: {$gte: 90}, At: ISODate("2026-09-29T10:00:00Z")}'))
    '{Score: {$gte: 90}, At: ISODate("2026-09-29T10:00:00Z")}'
"""

from .parser import Statement, is_complete, parse, parse_statement, parse_value, statements
from .printer import format_answer, format_error, format_value, json_line

__all__ = ["Statement", "statements", "parse", "parse_statement", "parse_value", "is_complete",
           "format_value", "format_answer", "format_error", "json_line"]
