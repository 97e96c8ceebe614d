"""How a failed network step becomes an `AteomError` (pure).

Every message names the actor, the object (a netns path, an interface, the
nftables table) and the reason; the code says whose problem it is:
FAILED_PRECONDITION when the worker cannot do it at all (no ``nft`` binary, no
CAP_NET_ADMIN or CAP_SYS_ADMIN, no nf_tables in the kernel), INTERNAL for
anything unexpected.
"""

from __future__ import annotations

import errno
import os

from ateom.errors import AteomError, ErrorCode, bounded, quote

# errno values that mean "this worker may not or cannot", not "this went wrong".
_PRECONDITION_ERRNOS = frozenset({
    errno.EPERM, errno.EACCES, errno.EROFS, errno.ENOSYS, errno.EOPNOTSUPP,
    errno.EAFNOSUPPORT, errno.EPROTONOSUPPORT,
})


class NetworkCleanupError(AteomError):
    """Some of an actor's network (or a crashed daemon's leftovers) could not be
    removed. `leftovers` names each object left behind, with why."""

    code = ErrorCode.INTERNAL

    def __init__(self, what: str, leftovers: list[str]) -> None:
        self.leftovers = tuple(leftovers)
        super().__init__(f"{what}: could not remove: " + "; ".join(self.leftovers))


def errno_of(exc: BaseException) -> int | None:
    """The errno an OSError or a pyroute2 NetlinkError carries (`code`), if any."""
    if isinstance(exc, OSError) and exc.errno is not None:
        return exc.errno
    code = getattr(exc, "code", None)
    return code if isinstance(code, int) else None


def reason_of(exc: BaseException) -> str:
    """A short human reason: the errno's name and text, or the exception's text."""
    number = errno_of(exc)
    if number is not None:
        name = errno.errorcode.get(number, str(number))
        text = exc.strerror if isinstance(exc, OSError) and exc.strerror else None
        return f"{name} ({text or os.strerror(number)})"
    return bounded(str(exc) or type(exc).__name__)


def code_for(exc: BaseException) -> ErrorCode:
    """FAILED_PRECONDITION for a permission or missing-support errno, else INTERNAL."""
    if errno_of(exc) in _PRECONDITION_ERRNOS:
        return ErrorCode.FAILED_PRECONDITION
    return ErrorCode.INTERNAL


def failure(uid: str | None, obj: str, action: str, exc: BaseException) -> AteomError:
    """``actor 'uid': <action> <obj>: <reason>`` (no actor part for None or ""), coded by
    `code_for`; an AteomError is returned as it is."""
    if isinstance(exc, AteomError):
        return exc
    who = f"actor {quote(uid)}: " if uid else ""
    return AteomError(f"{who}{action} {obj}: {reason_of(exc)}", code=code_for(exc))
