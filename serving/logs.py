"""Structured logs: one JSON object per line (or plain text), configured once at startup."""

from __future__ import annotations

import json
import logging
import sys
import time

_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():  # fields passed with extra={...}
            if key not in _STANDARD:
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class TextFormatter(logging.Formatter):
    """``time LEVEL logger: message key=value ...``: the fields JSON lines carry (model, engine,
    port...), as text."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        fields = [f"{key}={_text(value)}" for key, value in vars(record).items() if key not in _STANDARD]
        if not fields:
            return text
        head, newline, rest = text.partition("\n")  # a traceback stays below the first line
        return f"{head} {' '.join(fields)}{newline}{rest}"


def _text(value: object) -> str:
    shown = value if isinstance(value, str) else json.dumps(value, default=str)
    return json.dumps(shown) if not shown or any(c.isspace() or c in '"=' for c in shown) else shown


class ClientGone(logging.Filter):
    """gRPC's record of an answer it could not send on a stream whose client had cancelled it, the
    core not having told the server yet: an ERROR with a traceback for what is the client's
    normal right. It becomes one DEBUG line (dropped below that level), naming the method."""

    PREFIX = "ExecuteBatchError raised in core by servicer method"

    def filter(self, record: logging.LogRecord) -> bool:
        if not (isinstance(record.msg, str) and record.msg.startswith(self.PREFIX)):
            return True
        method = record.getMessage()[len(self.PREFIX):].strip(" []")
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        record.msg, record.args = "an answer could not be sent: the client has gone (%s)", (method,)
        record.exc_info = record.exc_text = None
        return logging.getLogger().isEnabledFor(logging.DEBUG)


def configure_logging(level: str, fmt: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    grpc_core = logging.getLogger("grpc._cython.cygrpc")
    if not any(isinstance(f, ClientGone) for f in grpc_core.filters):
        grpc_core.addFilter(ClientGone())
