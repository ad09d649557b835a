"""Server settings: one object, filled from defaults, then ``LITE_*`` environment variables,
then command-line flags (each later source wins).

Every field has a flag ``--field-name`` and a variable ``LITE_FIELD_NAME``; for example
``max_message_bytes`` is ``--max-message-bytes`` and ``LITE_MAX_MESSAGE_BYTES``. Secrets (the
bearer token) are better passed through the environment or a file than as a flag, since flags
are visible to other users in the process list.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path

from lite.engines.base import DEVICES

from .credentials import check_tls_files, checked_token, read_token_file
from .engine_options import EngineOptionPolicy
from .errors import ConfigError
from .eventloop import CHOICES as EVENT_LOOPS

ENV_PREFIX = "LITE_"
ORT_THREAD_POOLS = ("session", "shared")
LOG_LEVELS = ("debug", "info", "warning", "error")
MIB = 1024 * 1024
# The longest a poll interval or grace period may be: a day. Longer is a mistake (a unit slip), and
# far longer overflows the timers that apply them (threading.Timer refuses more than ~2**63 ns).
MAX_SECONDS = 86_400.0


@dataclass(frozen=True)
class Settings:
    repository: Path = Path("models")
    host: str = "0.0.0.0"
    port: int = 8001
    metrics_port: int = 8002  # 0: no metrics endpoint
    # Where the metrics endpoint listens; empty: ``host``. It asks for the same token and client
    # certificate as the gRPC port; 127.0.0.1 keeps it off the network altogether.
    metrics_host: str = ""
    device: str = "auto"
    models: tuple[str, ...] = ()  # load only these at startup; empty: every model in the repository
    poll_interval_s: float = 0.0  # > 0: rescan the repository and reload what changed
    # Model files are read into private memory, so that a file copied over in place (cp) never
    # faults a loaded model or changes its weights; true: memory-map them (shared pages, no copy),
    # for repositories whose files are only ever replaced by rename or mounted read-only.
    map_model_files: bool = False
    repository_control: bool = True  # RepositoryModelLoad / Unload allowed
    # Shared libraries of custom ops that a model's config.json may name in its engine_options
    # (custom_op_libraries); a config naming any other is refused (serving.engine_options).
    custom_op_libraries: tuple[str, ...] = ()
    # config.json may set every engine option, files and folders included, as Triton lets
    # config.pbtxt: only for repositories that only those trusted with the server's account can write.
    trust_engine_options: bool = False
    max_message_bytes: int = 64 * MIB
    # The most elements a request's tensor may claim (the product of its non-zero dimensions: an
    # empty [2**28, 0] claims 2**28) and an output may be predicted to have (serving.limits).
    # 0: max_message_bytes, as many as a tensor of one-byte elements filling a message holds.
    max_tensor_elements: int = 0
    max_queue_size: int = 1024  # per model version, unless its config says otherwise
    instance_count: int = 1  # default model instances, unless a config says otherwise
    # Intra-op threads of each model's ONNX Runtime session, unless a config says otherwise (of
    # the one shared pool with ort_thread_pools "shared").
    # 0: ONNX Runtime's default (one per core). 1 suits small models and many instances: no
    # thread pool whose spinning workers compete with the gRPC threads for the cores.
    threads: int = 0
    # Whose threads the models' ONNX Runtime sessions run on: "session", a pool per session, whose
    # workers block between runs; "shared", ONNX Runtime's one pool of the process, of ``threads``
    # threads (config.json's threads then does not apply: ONNX Runtime builds no session with a
    # pool of its own once the shared one exists). The shared pool's workers spin on after every
    # run, which Python cannot stop: 300 models took 314 threads instead of 614, but a small CNN's
    # requests took 1.3-1.6x as long and 1.5-1.6x the CPU on a 2-core machine
    # (bench/serving_many_models.py). So "shared" is for repositories whose thread count is the
    # limit (a container's pids limit).
    ort_thread_pools: str = "session"
    # Executions shorter than this (moving average of CPU time on the loop) run on the event loop:
    # cheaper than a thread hop. 0: always use the instance threads. At 200 µs the identity model
    # of bench/serving.py runs inline on a busy 2-core machine (at 50 µs it did not), which took
    # its concurrency-1 p50 from 1.24-1.41x to 1.19x the bare gRPC floor (docs/benchmarks.md).
    inline_execution_us: int = 200
    # Server processes sharing the port (SO_REUSEPORT; the kernel spreads connections over
    # them), each with its own event loop and its own copy of every model: one Python process
    # takes in a few thousand requests a second, whatever it serves (bench/gpu_serving.py
    # --server floor). Each batches the requests of its own connections; statistics are per
    # process; the repository-control RPCs are off (use poll_interval_s to reload).
    workers: int = 1
    # auto: uvloop when it is installed (the serve extra installs it), else asyncio's loop.
    event_loop: str = "auto"
    # Triton's system shared-memory extension (serving.shared_memory): a client on this machine
    # registers regions of /dev/shm objects, and tensors name them instead of carrying bytes. A
    # client that may call the server can then make it read and write any /dev/shm object its
    # user can open; false turns the calls off (UNIMPLEMENTED).
    shared_memory: bool = True
    max_shared_memory_regions: int = 128
    max_shared_memory_bytes: int = 4096 * MIB  # the registered regions together
    grace_period_s: float = 30.0  # SIGTERM: time left to in-flight requests
    stream_concurrency: int = 64  # requests of one stream in flight at once
    # gRPC keepalive (HTTP/2 PING frames), named and measured (milliseconds) as Triton's flags are.
    # The server's own pings: after grpc_keepalive_time without reads it pings, and closes the
    # connection when no answer comes within grpc_keepalive_timeout (gRPC's defaults).
    grpc_keepalive_time: int = 7_200_000
    grpc_keepalive_timeout: int = 20_000
    # The clients' pings. gRPC core's defaults (no pings on a connection without calls, none more
    # often than every 5 minutes while no data flows, GOAWAY "too_many_pings" after 2 such strikes)
    # end quiet streams and idle connections of the keepalive settings clients commonly use: a
    # grpc-js client pinging every 10 s lost its open stream after 40 s, one pinging every 1 s
    # after 4 s (RESOURCE_EXHAUSTED "Bandwidth exhausted"; tritonclient: UNAVAILABLE "Too many
    # pings"). So pings are allowed without calls, and as often as every 500 ms: half of
    # the shortest interval clients commonly set (1 s), as pings of a client pinging every second
    # can arrive a little less than a second apart. A client pinging faster is still struck and,
    # after more than grpc_http2_max_ping_strikes strikes, sent away: pings cannot flood the server.
    grpc_keepalive_permit_without_calls: bool = True
    grpc_http2_min_recv_ping_interval_without_data: int = 500
    grpc_http2_max_ping_strikes: int = 2  # 0: any number of strikes
    grpc_http2_max_pings_without_data: int = 2  # the server's own pings while it sends no data; 0: no limit
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_client_ca: Path | None = None  # set: mutual TLS, clients must present a certificate
    auth_token: str = field(default="", repr=False)
    auth_token_file: Path | None = None
    auth_exempt_health: bool = True  # grpc.health.v1 without a token (Kubernetes probes)
    reflection: bool = True
    log_level: str = "info"
    log_format: str = "json"  # json | text
    server_name: str = "lite"

    def __post_init__(self) -> None:
        _check_positive(self, ("max_message_bytes", "max_queue_size", "instance_count", "stream_concurrency",
                               "workers", "max_shared_memory_regions", "max_shared_memory_bytes"))
        _check_int_range(self, "max_message_bytes", 1, _GRPC_INT_MAX)  # gRPC reads it as a C int
        _check_seconds(self, ("poll_interval_s", "grace_period_s"))
        if self.max_tensor_elements < 0:
            raise ConfigError(f"setting max_tensor_elements must be >= 0 (0: max_message_bytes), got "
                              f"{self.max_tensor_elements}")
        _check_keepalive(self)
        if self.threads < 0:
            raise ConfigError(f"setting threads must be >= 0 (0: ONNX Runtime's default), got {self.threads}")
        if self.ort_thread_pools not in ORT_THREAD_POOLS:
            raise ConfigError(f"ort_thread_pools {self.ort_thread_pools!r}: expected one of {', '.join(ORT_THREAD_POOLS)}")
        if not 0 <= self.port < 65536 or not 0 <= self.metrics_port < 65536:
            raise ConfigError(f"port {self.port} / metrics_port {self.metrics_port} out of range 0..65535")
        if self.metrics_port and self.metrics_port + self.workers - 1 > 65535:
            raise ConfigError(f"metrics_port {self.metrics_port} + {self.workers} workers: worker i serves metrics "
                              "on metrics_port + i, which must stay within 65535")
        if self.device not in DEVICES:
            raise ConfigError(f"device {self.device!r}: expected one of {', '.join(DEVICES)}")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ConfigError("tls_cert and tls_key go together: give both or neither")
        if self.tls_client_ca is not None and self.tls_cert is None:
            raise ConfigError("tls_client_ca (mutual TLS) needs tls_cert and tls_key")
        check_tls_files(self.tls_cert, self.tls_key, self.tls_client_ca)
        if self.event_loop not in EVENT_LOOPS:
            raise ConfigError(f"event_loop {self.event_loop!r}: expected one of {', '.join(EVENT_LOOPS)}")
        if self.log_level.lower() not in LOG_LEVELS:
            raise ConfigError(f"log_level {self.log_level!r}: expected one of {', '.join(LOG_LEVELS)} "
                              f"({_flag_and_variable('log_level')})")
        if self.log_format not in ("json", "text"):
            raise ConfigError(f"log_format {self.log_format!r}: expected json or text")
        # Read the token now: a blank or unreadable one must stop the server before it listens.
        _ = self.token
        object.__setattr__(self, "custom_op_libraries", _libraries(self.custom_op_libraries))

    @property
    def token(self) -> str:
        """The bearer token every call must carry; empty: no authentication.

        Given but blank (an empty token file, a token of spaces) is an error, never "no
        authentication": a deployment that meant to protect the server must not run it open."""
        if self.auth_token:
            return checked_token(self.auth_token, "auth_token")
        if self.auth_token_file is not None:
            return read_token_file(self.auth_token_file)
        return ""

    @property
    def engine_option_policy(self) -> EngineOptionPolicy:
        """The engine options models' config.json may set beyond the tuning ones."""
        return EngineOptionPolicy(self.custom_op_libraries, self.trust_engine_options)

    @property
    def tensor_elements_limit(self) -> int:
        """``max_tensor_elements``, or ``max_message_bytes`` when that is 0."""
        return self.max_tensor_elements or self.max_message_bytes

    @classmethod
    def from_sources(
        cls, args: argparse.Namespace | None = None, environ: Mapping[str, str] | None = None
    ) -> Settings:
        """Defaults, overridden by ``LITE_*`` variables, overridden by flags that were given."""
        environ = os.environ if environ is None else environ
        values: dict[str, object] = {}
        for f in fields(cls):
            raw = environ.get(ENV_PREFIX + f.name.upper())
            if raw is not None:
                values[f.name] = _parse(f, raw)
            flag = getattr(args, f.name, None) if args is not None else None
            if flag is not None:
                values[f.name] = _parse(f, flag) if isinstance(flag, (str, list)) else flag
        return cls(**values)

    def replace(self, **changes: object) -> Settings:
        return dataclasses.replace(self, **changes)


# The help text of each setting's flag (lite serve --help); every field has one.
HELP = {
    "repository": "the model repository: DIR/<model>/<version>/model.lite, with an optional DIR/<model>/config.json",
    "host": "address to listen on for gRPC",
    "port": "gRPC port (KServe v2 / Open Inference Protocol, health, reflection)",
    "metrics_port": "Prometheus metrics port (0: no metrics endpoint)",
    "metrics_host": "address the metrics endpoint listens on (empty: the gRPC host)",
    "device": "default device of every model: auto, numpy, cpu, cuda or tensorrt (config.json may override)",
    "models": "load this model at startup (repeatable)",
    "poll_interval_s": "rescan the repository every N seconds and load, reload or unload what changed (0: never)",
    "map_model_files": "memory-map model files instead of reading them into memory; only for repositories whose "
                       "files are replaced by rename or mounted read-only",
    "repository_control": "allow the RepositoryModelLoad/Unload calls",
    "custom_op_libraries": "a shared library of custom ops that models' config.json may name in engine_options "
                           "custom_op_libraries (repeatable); configs may name no other",
    "trust_engine_options": "let config.json set every engine option, files, folders and libraries included (only "
                            "for repositories that only users trusted with this server's account can write)",
    "max_message_bytes": "largest gRPC message, request or answer, in bytes",
    "max_tensor_elements": "most elements one request's input or output may hold (0: derived from "
                           "--max-message-bytes)",
    "max_queue_size": "requests queued per model version before RESOURCE_EXHAUSTED (config.json may override)",
    "instance_count": "executions of one model version at once (config.json may override)",
    "threads": "intra-op threads of each ONNX Runtime session's pool, or of the one shared pool with "
               "--ort-thread-pools shared (0: ONNX Runtime's default)",
    "ort_thread_pools": "session (a thread pool per ONNX Runtime session, sized by config.json's threads where it "
                        "sets them) or shared (one pool for every model: fewer threads, but its workers spin after "
                        "each run)",
    "inline_execution_us": "run executions shorter than this on the event loop instead of a thread (0: never)",
    "workers": "server processes sharing the port, each with its own copy of every model",
    "event_loop": "auto (uvloop when installed), uvloop or asyncio",
    "shared_memory": "answer the system shared-memory calls, so that clients on this machine pass tensors in /dev/shm "
                     "regions instead of in messages",
    "max_shared_memory_regions": "most system shared-memory regions registered at once",
    "max_shared_memory_bytes": "most bytes the registered shared-memory regions may span together",
    "grace_period_s": "on SIGTERM, seconds left to requests in flight before the server stops",
    "stream_concurrency": "requests of one stream in flight at once (the stream reads no more until one is answered)",
    "grpc_keepalive_time": "milliseconds a connection may go without reads before the server pings it",
    "grpc_keepalive_timeout": "milliseconds the server waits for the answer to its ping before it closes the "
                              "connection",
    "grpc_keepalive_permit_without_calls": "accept clients' keepalive pings on connections without calls "
                                           "(--no-... sends such clients away)",
    "grpc_http2_min_recv_ping_interval_without_data": "fewest milliseconds between two client pings while no data "
                                                      "is sent; a ping sooner is a strike",
    "grpc_http2_max_ping_strikes": "strikes the server tolerates; one more closes the connection (GOAWAY "
                                   "too_many_pings; 0: never)",
    "grpc_http2_max_pings_without_data": "pings the server sends on a connection while it sends no data (0: no "
                                         "limit)",
    "tls_cert": "server certificate (PEM); with --tls-key, the server speaks TLS",
    "tls_key": "the certificate's private key (PEM)",
    "tls_client_ca": "CA certificate (PEM) that client certificates must chain to: mutual TLS",
    "auth_token": "bearer token every call must carry (better given by LITE_AUTH_TOKEN or --auth-token-file)",
    "auth_token_file": "file holding the bearer token every call must carry",
    "auth_exempt_health": "answer grpc.health.v1 without the token (Kubernetes probes)",
    "reflection": "answer gRPC server reflection (v1 and v1alpha)",
    "log_level": "debug, info, warning or error",
    "log_format": "json (one object a line) or text",
    "server_name": "the name ServerMetadata answers",
}


# Settings of several values: one flag per value.
_REPEATABLE = {"models": "--model", "custom_op_libraries": "--custom-op-library"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per field; every default is None so that unset flags leave env/defaults alone."""
    for f in fields(Settings):
        flag = "--" + f.name.replace("_", "-")
        env = ENV_PREFIX + f.name.upper()
        default = f.default if f.default is not dataclasses.MISSING else None
        shown = "" if f.name == "auth_token" else f" (default {default})"
        if f.type in ("bool",):
            parser.add_argument(
                flag, dest=f.name, default=None, action=argparse.BooleanOptionalAction,
                help=f"{HELP[f.name]}; env {env}{shown}",
            )
        elif f.name in _REPEATABLE:
            parser.add_argument(
                _REPEATABLE[f.name], dest=f.name, action="append", default=None,
                help=f"{HELP[f.name]}; env {env} (comma-separated)",
            )
        else:
            parser.add_argument(flag, dest=f.name, default=None, help=f"{HELP[f.name]}; env {env}{shown}")


def _parse(f: dataclasses.Field, raw: object) -> object:
    if isinstance(raw, list):
        return tuple(raw)
    text = str(raw)
    kind = f.type
    try:
        if kind == "bool":
            if text.lower() in ("1", "true", "yes", "on"):
                return True
            if text.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(text)
        if kind == "int":
            return int(text)
        if kind == "float":
            return float(text)
        if kind == "Path":
            return Path(text)
        if kind == "Path | None":
            return Path(text) if text else None
        if kind == "tuple[str, ...]":
            return tuple(name for name in text.split(",") if name)
    except ValueError as err:
        raise ConfigError(f"setting {f.name}: cannot read {text!r} as {kind}") from err
    return text


def _libraries(paths: tuple[str, ...]) -> tuple[str, ...]:
    """``paths`` resolved, each an existing file: a library the operator allows must be there at startup."""
    resolved = []
    for path in paths:
        if not Path(path).is_file():
            raise ConfigError(f"custom_op_libraries {str(path)!r}: no such file; give the path of the shared library "
                              "(e.g. onnxruntime_extensions.get_library_path())")
        resolved.append(str(Path(path).resolve()))
    return tuple(resolved)


def _check_positive(settings: Settings, names: tuple[str, ...]) -> None:
    for name in names:
        if getattr(settings, name) <= 0:
            raise ConfigError(f"setting {name} must be positive, got {getattr(settings, name)}")


_GRPC_INT_MAX = 2**31 - 1


def _flag_and_variable(name: str) -> str:
    return f"--{name.replace('_', '-')}, {ENV_PREFIX}{name.upper()}"


def _check_int_range(settings: Settings, name: str, least: int, most: int) -> None:
    value = getattr(settings, name)
    if not least <= value <= most:
        raise ConfigError(f"setting {name} must be an integer from {least} to {most}, got {value} "
                          f"({_flag_and_variable(name)})")


def _check_seconds(settings: Settings, names: tuple[str, ...]) -> None:
    """Durations: finite (NaN compares false with everything, so it would pass every later check and
    skip what it times) and from 0 to ``MAX_SECONDS``."""
    for name in names:
        value = getattr(settings, name)
        if not (math.isfinite(value) and 0 <= value <= MAX_SECONDS):
            raise ConfigError(f"setting {name} must be a number of seconds from 0 to {MAX_SECONDS:.0f}, got {value} "
                              f"({_flag_and_variable(name)})")


def _check_keepalive(settings: Settings) -> None:
    """The keepalive settings, as gRPC takes them: times positive, counts and the interval >= 0, all
    within a C int (gRPC reads channel arguments as such)."""
    for name, least in (("grpc_keepalive_time", 1), ("grpc_keepalive_timeout", 1),
                        ("grpc_http2_min_recv_ping_interval_without_data", 0), ("grpc_http2_max_ping_strikes", 0),
                        ("grpc_http2_max_pings_without_data", 0)):
        _check_int_range(settings, name, least, _GRPC_INT_MAX)
