"""How the server's log lines are written: ``text`` for people, ``json`` (one object a line) for collectors."""

from __future__ import annotations

import datetime
import json
import logging

FORMATS = ("text", "json")
TEXT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    """JsonFormatter writes a record as one line of JSON: ``{"time", "level", "logger", "message"}``,
    then ``"exception"`` (its traceback) when it has one, and the fields a call passed as
    ``extra={"hoarddb": {...}}`` (a connection's ``peer`` and ``user``, a slow request's ``micros``)."""

    def format(self, record: logging.LogRecord) -> str:
        line = {"time": datetime.datetime.fromtimestamp(record.created, datetime.timezone.utc)
                .isoformat(timespec="milliseconds").replace("+00:00", "Z"),
                "level": record.levelname.lower(), "logger": record.name, "message": record.getMessage()}
        fields = getattr(record, "hoarddb", None)
        if isinstance(fields, dict):
            for key, value in fields.items():
                line.setdefault(key, value)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def configure(level: str, fmt: str = "text") -> None:
    """Send every log record at ``level`` or above to standard error, written as ``fmt``."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(getattr(logging, level.upper()))
