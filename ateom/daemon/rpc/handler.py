"""The one place every RPC goes through: parsing, logging, error translation, observers.

`add_servicer` registers a servicer's methods with deserializers that leave
the bytes unparsed (`wire.Undecoded`); `rpc` parses them (`wire.decode`), so
a request protobuf refuses (bad UTF-8) or one with a NUL in a string is
INVALID_ARGUMENT, logged and counted like any other refusal, instead of
grpc's bare INTERNAL. `AteomError.code` names a grpc.StatusCode, so
translation is by name. Any other exception is INTERNAL (and logged with its
traceback). The client's deadline is bound for the call (`ateom.daemon.calls.deadline`),
so waits inside it end with it. Metrics hook here: `RPC_OBSERVERS` are called with (method,
status code name, seconds).
"""

from __future__ import annotations

import functools
import itertools
import time
from collections.abc import Callable
from typing import Any, TypeVar

import grpc
import structlog
from google.protobuf import message_factory
from google.protobuf.descriptor import ServiceDescriptor

from ateom.daemon.calls import answer, deadline
from ateom.daemon.rpc import wire
from ateom.errors import AteomError, bounded

log = structlog.get_logger("ateom.rpc")

RPC_OBSERVERS: list[Callable[[str, str, float], None]] = []

F = TypeVar("F", bound=Callable[..., Any])

# Each call's number, on every line it logs: what groups a call's phases with
# its ``rpc`` event, where calls on other threads interleave in the log.
_CALLS = itertools.count(1)

# gRPC carries the status message in trailing metadata, which peers cap (8 KiB
# by default): a longer one turns the answer into "metadata size exceeds hard
# limit" and the reason is lost. Validation quotes inputs short; this bounds
# whatever else (runsc's log tail, an exception's text) a message carries.
_DETAILS_LIMIT = 4096


def _details(message: str) -> str:
    data = message.encode("utf-8", "replace")
    if len(data) <= _DETAILS_LIMIT:
        return message
    cut = data[:_DETAILS_LIMIT].decode("utf-8", "ignore")
    return f"{cut}… ({len(data)} bytes)"


def rpc(method: str) -> Callable[[F], F]:
    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
            started, cpu_started = time.perf_counter(), time.thread_time()
            code = "OK"
            uid = None
            call = next(_CALLS)
            try:
                with structlog.contextvars.bound_contextvars(rpc=method, call=call):
                    try:
                        request = wire.decode(request)
                        uid = bounded(getattr(request, "actor_uid", "")) or None
                        with structlog.contextvars.bound_contextvars(actor_uid=uid), \
                                deadline.bound(context.time_remaining()), \
                                answer.collecting() as later:
                            try:
                                return fn(self, request, context)
                            finally:
                                # Started once gRPC has sent the answer (or now,
                                # when the call has already ended).
                                if later and not context.add_callback(
                                        lambda: answer.run_all(later)):
                                    answer.run_all(later)
                    except AteomError as exc:
                        code = exc.code.name
                        log.warning("rpc_failed", code=code, error=bounded(str(exc), 2000))
                        context.abort(grpc.StatusCode[code], _details(str(exc)))
                    except Exception as exc:  # a bug, not a refusal: keep the traceback
                        code = "INTERNAL"
                        log.exception("rpc_crashed")
                        context.abort(grpc.StatusCode.INTERNAL,
                                      _details(f"internal error: {exc}"))
            finally:
                seconds = time.perf_counter() - started
                # The CPU this call's own thread spent: ateom's work on its path,
                # whatever the machine's load made of its wall time.
                log.info("rpc", rpc=method, code=code, actor_uid=uid, call=call,
                         duration_ms=round(seconds * 1000, 3),
                         cpu_ms=round((time.thread_time() - cpu_started) * 1000, 3))
                for observer in RPC_OBSERVERS:
                    observer(method, code, seconds)

        wrapper.rpc_method = method  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return decorate


def add_servicer(server: grpc.Server, servicer: object, service: ServiceDescriptor) -> None:
    """Serve `service` (unary methods, each wrapped in `rpc`) from `servicer`.

    What the generated ``add_*Servicer_to_server`` does, but the deserializer
    only wraps the bytes: parsing happens inside `rpc`. The generated stubs,
    reflection and health are unaffected (they work from the descriptors).
    """
    handlers = {}
    for m in service.methods:
        behavior = getattr(servicer, m.name)
        if not hasattr(behavior, "rpc_method"):
            # It would be handed unparsed bytes.
            raise TypeError(f"{type(servicer).__name__}.{m.name} is not wrapped in @rpc")
        handlers[m.name] = grpc.unary_unary_rpc_method_handler(
            behavior,
            request_deserializer=functools.partial(
                wire.Undecoded, message_factory.GetMessageClass(m.input_type)),
            response_serializer=message_factory.GetMessageClass(
                m.output_type).SerializeToString,
        )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service.full_name, handlers),))
