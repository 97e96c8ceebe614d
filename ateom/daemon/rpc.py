"""The one place every RPC goes through: logging, error translation, observers.

`AteomError.code` names a grpc.StatusCode, so translation is by name. Any
other exception is INTERNAL (and logged with its traceback). Metrics hook
here: `RPC_OBSERVERS` are called with (method, status code name, seconds).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any, TypeVar

import grpc
import structlog

from ateom.errors import AteomError

log = structlog.get_logger("ateom.rpc")

RPC_OBSERVERS: list[Callable[[str, str, float], None]] = []

F = TypeVar("F", bound=Callable[..., Any])


def rpc(method: str) -> Callable[[F], F]:
    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
            started = time.perf_counter()
            code = "OK"
            uid = getattr(request, "actor_uid", "") or None
            try:
                with structlog.contextvars.bound_contextvars(rpc=method, actor_uid=uid):
                    try:
                        return fn(self, request, context)
                    except AteomError as exc:
                        code = exc.code.name
                        log.warning("rpc_failed", code=code, error=str(exc))
                        context.abort(grpc.StatusCode[code], str(exc))
                    except Exception as exc:  # a bug, not a refusal: keep the traceback
                        code = "INTERNAL"
                        log.exception("rpc_crashed")
                        context.abort(grpc.StatusCode.INTERNAL, f"internal error: {exc}")
            finally:
                seconds = time.perf_counter() - started
                log.info("rpc", rpc=method, code=code, actor_uid=uid,
                         duration_ms=round(seconds * 1000, 3))
                for observer in RPC_OBSERVERS:
                    observer(method, code, seconds)

        return wrapper  # type: ignore[return-value]

    return decorate
