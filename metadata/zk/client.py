"""Connecting to ZooKeeper: :func:`connect` builds and starts a :class:`KazooClient` from plain
arguments (hosts, session timeout, digest credentials, TLS files); :func:`job_acl` and
:func:`ancestor_acl` are the ACLs the store gives the nodes it creates; :func:`foreign_rights`
and :func:`describe_acl` check and show the ACL of a node it finds; :func:`check_hosts` and
:func:`split_auth` tell a usable connect string and credentials (the config validates with them).
"""

from __future__ import annotations

import ipaddress
import re
import urllib.parse
from typing import Any

import structlog
from kazoo.client import KazooClient
from kazoo.exceptions import AuthFailedError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry
from kazoo.security import ACL, OPEN_ACL_UNSAFE, Permissions, make_acl, make_digest_acl

from metadata.zk.connection import lean_client
from metadata.zk.errors import PermissionDenied, StoreUnavailable
from metadata.zk.handler import PollingHandler
from metadata.zk.layout import root_problem

__all__ = [
    "ancestor_acl",
    "check_hosts",
    "connect",
    "describe_acl",
    "foreign_rights",
    "job_acl",
    "split_auth",
]

#: The rights that change a node or its children (everything but READ).
CHANGE_RIGHTS = Permissions.WRITE | Permissions.CREATE | Permissions.DELETE | Permissions.ADMIN
_LETTERS = (
    (Permissions.CREATE, "c"),
    (Permissions.DELETE, "d"),
    (Permissions.READ, "r"),
    (Permissions.WRITE, "w"),
    (Permissions.ADMIN, "a"),
)

_HOST_NAME = re.compile(r"^[A-Za-z0-9_]([A-Za-z0-9_.-]{0,251}[A-Za-z0-9_])?$")


def split_auth(auth: str) -> tuple[str, str]:
    """("user", "password") from "user:password"; ValueError (never showing ``auth``) otherwise."""
    user, sep, password = auth.partition(":")
    if not sep or not user:
        raise ValueError("must be 'user:password' with a user name before the colon")
    return user, password


def _valid_host(host: str) -> bool:
    if _HOST_NAME.match(host):
        return True
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _check_host_port(entry: str) -> None:
    parts = urllib.parse.urlsplit("zk://" + entry.strip())
    if parts.hostname is None or not _valid_host(parts.hostname):
        raise ValueError("is not host[:port] (a host name or IP address)")
    try:
        port = parts.port
    except ValueError:
        raise ValueError("has a port that is not a number from 1 to 65535") from None
    if port == 0 or parts.path or parts.query or parts.fragment or parts.username is not None:
        raise ValueError("is not host[:port] (port 1..65535, nothing after it)")


def check_hosts(hosts: str) -> None:
    """ValueError naming the bad part unless ``hosts`` is a ZooKeeper connect string:
    ``host[:port][,host[:port]...][/chroot]`` (kazoo's own check fails later, and unclearly)."""
    host_ports, _, chroot = hosts.partition("/")
    entries = host_ports.split(",")
    for index, entry in enumerate(entries, 1):
        where = f"host {index} of {len(entries)}" if len(entries) > 1 else "the host"
        if not entry.strip():
            raise ValueError(f"{where} is empty (expected host[:port][,host[:port]...])")
        try:
            _check_host_port(entry)
        except ValueError as exc:
            raise ValueError(f"{where} {exc}") from None
    if chroot and (chroot.endswith("/") or "//" in chroot or any(c.isspace() for c in chroot)):
        raise ValueError("the chroot after '/' is not a path like /apps/affinity")
    problem = root_problem(f"/{chroot}") if chroot else None
    if problem is not None:  # every path of the job lies below it: the root's own rule
        raise ValueError(f"the chroot /{chroot}: {problem}")


def job_acl(auth: str) -> list[ACL]:
    """The ACL of every node of a job: full rights for the digest user ``auth`` ("user:password"),
    or open (world: all) when ``auth`` is empty."""
    if not auth:
        return list(OPEN_ACL_UNSAFE)
    user, password = split_auth(auth)
    return [make_digest_acl(user, password, all=True)]


def ancestor_acl(auth: str) -> list[ACL]:
    """The ACL of the folders above a protected job (e.g. ``/affinity``) that the store creates:
    the digest user may do anything, everyone else may list and create (other jobs' folders)."""
    if not auth:
        return list(OPEN_ACL_UNSAFE)
    return [*job_acl(auth), make_acl("world", "anyone", read=True, create=True)]


def foreign_rights(acls: list[ACL], auth: str, allowed: int = 0) -> list[ACL]:
    """The entries of ``acls`` that give someone other than the digest user ``auth`` a right to
    change the node (:data:`CHANGE_RIGHTS`) beyond ``allowed`` (e.g. CREATE on ``/affinity``)."""
    ours = job_acl(auth)[0].id
    return [acl for acl in acls if acl.id != ours and acl.perms & CHANGE_RIGHTS & ~allowed]


def describe_acl(acls: list[ACL]) -> str:
    """``world:anyone=cdrwa, digest:ops=cdrwa``: scheme, id and rights of each entry (a digest
    id shows its user only, never its hash)."""
    parts = []
    for acl in acls:
        who = acl.id.id.split(":", 1)[0] if acl.id.scheme == "digest" else acl.id.id
        rights = "".join(letter for bit, letter in _LETTERS if acl.perms & bit) or "-"
        parts.append(f"{acl.id.scheme}:{who}={rights}")
    return ", ".join(parts) or "(empty)"


def connect(
    hosts: str,
    *,
    session_timeout_s: float = 10.0,
    connect_timeout_s: float = 15.0,
    auth: str = "",
    use_ssl: bool = False,
    ca: str | None = None,
    certfile: str | None = None,
    keyfile: str | None = None,
    verify_certs: bool = True,
    log: Any = None,
) -> KazooClient:
    """Build and start a KazooClient (``log``: the structlog logger to use, by default
    ``metadata.zk``).

    ``auth`` ("user:password") adds digest credentials and makes the digest ACL the client's
    default ACL; ``use_ssl``/``ca``/``certfile``/``keyfile``/``verify_certs`` pass through to
    kazoo. The connection is retried for ever (every 0.1 s to 1 s), so the client rides out a
    server restart; the first connection must succeed within ``connect_timeout_s`` or
    :class:`StoreUnavailable` is raised.
    """
    check_hosts(hosts)
    auth_data = [("digest", auth)] if auth else None
    if auth:
        split_auth(auth)
    client = KazooClient(
        hosts=hosts,
        timeout=session_timeout_s,
        connection_retry=KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=1),
        command_retry=KazooRetry(max_tries=5, delay=0.1, backoff=2, max_delay=1),
        auth_data=auth_data,
        default_acl=job_acl(auth) if auth else None,
        use_ssl=use_ssl,
        ca=ca,
        certfile=certfile,
        keyfile=keyfile,
        verify_certs=verify_certs,
        handler=PollingHandler(),  # one poll(2) per wait, not an epoll built and closed
    )
    lean_client(client)  # recv/send first, poll only on EAGAIN; callers write their requests
    log = log if log is not None else structlog.get_logger("metadata.zk")
    log = log.bind(hosts=hosts, use_ssl=use_ssl)
    try:
        client.start(timeout=connect_timeout_s)
    except KazooTimeoutError as exc:
        log.warning("zk.connect_failed", timeout_s=connect_timeout_s)
        raise StoreUnavailable(
            hosts, f"could not connect to ZooKeeper within {connect_timeout_s}s"
        ) from exc
    except AuthFailedError as exc:
        client.stop()
        client.close()
        raise PermissionDenied(hosts, "ZooKeeper rejected the credentials") from exc
    log.info("zk.connected", session_timeout_s=session_timeout_s)
    return client
