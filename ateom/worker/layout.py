"""Where the node agent finds this worker, and where it lays actors out.

Substrate's node agent and its worker share one hostPath, the node's base dir
(``/var/lib/ateom-gvisor``): it dials ``<base>/ateoms/<pod uid>/ateom.sock`` and
writes every actor's dirs under ``<base>/actors/``. The Pod's uid keys the socket
because several worker Pods on one node share the base dir, and a restarted
container of the same Pod finds its predecessor's socket there (replaced, not
refused, when nobody answers on it: `ateom.daemon.rpc.server.prepare_socket`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from ateom.errors import AteomError, ErrorCode, quote

DEFAULT_BASE_DIR = "/var/lib/ateom-gvisor"
# Kubernetes object uids are RFC 4122 UUIDs; a pod uid also becomes a directory
# name here, so anything but one safe path component is refused.
_POD_UID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def check_pod_uid(uid: str, said: str = "--pod-uid") -> None:
    """A pod uid is one safe path component (INVALID_ARGUMENT naming `said` otherwise)."""
    if not _POD_UID.match(uid) or ".." in uid:
        raise AteomError(f"{said} {quote(uid)}: must be the Pod's uid (letters, digits, '.',"
                         " '_' or '-'; it names a directory under the base dir)",
                         code=ErrorCode.INVALID_ARGUMENT)


@dataclass(frozen=True, slots=True)
class WorkerLayout:
    """The base dir as Substrate shares it, for one worker Pod (pure)."""

    base_dir: str
    pod_uid: str

    @property
    def own_dir(self) -> str:
        """This Pod's directory under the base dir: its socket lives here."""
        return os.path.join(self.base_dir, "ateoms", self.pod_uid)

    @property
    def socket(self) -> str:
        """The unix socket the node agent dials for this Pod."""
        return os.path.join(self.own_dir, "ateom.sock")

    @property
    def actors_root(self) -> str:
        """Where the node agent lays out every actor's dirs."""
        return os.path.join(self.base_dir, "actors")


def prepare(layout: WorkerLayout) -> None:
    """Make the Pod's own dir and the actors root where missing (0700; an existing one
    is left as it is). The controller's hostPath makes the base dir, and the node
    agent an actor's own dirs; a worker started before the node agent's first actor
    would otherwise be NOT_SERVING for an actors root that nobody has made yet."""
    for path in (layout.own_dir, layout.actors_root):
        os.makedirs(path, mode=0o700, exist_ok=True)
