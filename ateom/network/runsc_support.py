"""Whether a runsc can take over an actor's network namespace on this host.

A sandbox network (runsc's default, ``--network=sandbox``) needs runsc to tell the
host's own network namespace from the one the spec names: it refuses the host's
("cannot run with network enabled in root network namespace"). Before
release-20240731 (gVisor 19f6b0c) it asked whether ``/proc/sys/net/core/rmem_default``
exists, which only the host's namespace had, until kernels gave every namespace one
(seen on 6.18): such a runsc (Debian's 0.0~20240729 among them) refuses every actor's
namespace there. The daemon then runs that runsc's actors without a network
(``--network=none``), and says so (`netns_problem`).
"""

from __future__ import annotations

import functools
import os

from ateom.network.namespace import CLONE_NEWNET, _check, _libc, in_own_thread
from ateom.runsc.probe import RunscInfo, release_date

# The first release date whose runsc tells network namespaces apart by dev_weight.
NETNS_FIX_DATE = "20240731"


@functools.cache
def namespaces_look_like_the_hosts() -> bool:
    """Whether a fresh network namespace shows ``/proc/sys/net/core/rmem_default``
    (makes one for a moment, on a thread of its own; cached: the kernel does not
    change). False where no namespace can be made: nothing to judge then."""

    def look() -> bool:
        _check(_libc.unshare(CLONE_NEWNET), "unshare(CLONE_NEWNET)")
        return os.path.exists("/proc/sys/net/core/rmem_default")

    try:
        return in_own_thread(look, "look")
    except OSError:
        return False


def netns_problem(info: RunscInfo) -> str:
    """Why this runsc cannot take over an actor's network namespace here, "" when it
    can (pure but for `namespaces_look_like_the_hosts`)."""
    date = release_date(info.version)
    if date is None or date >= NETNS_FIX_DATE or not namespaces_look_like_the_hosts():
        return ""
    return (f"runsc {info.path} ({info.version}) takes every network namespace of this"
            " kernel for the host's own and refuses it (\"cannot run with network enabled"
            f" in root network namespace\"): runsc release-{NETNS_FIX_DATE} or newer gives"
            " actors networks here")
