"""Connecting to ZooKeeper: :func:`connect` builds and starts a :class:`KazooClient` from plain
arguments (hosts, session timeout, digest credentials, TLS files); :func:`job_acl` and
:func:`ancestor_acl` are the ACLs the store gives the nodes it creates; :func:`foreign_rights`
and :func:`describe_acl` check and show the ACL of a node it finds."""

from __future__ import annotations

import structlog
from kazoo.client import KazooClient
from kazoo.exceptions import AuthFailedError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry
from kazoo.security import ACL, OPEN_ACL_UNSAFE, Permissions, make_acl, make_digest_acl

from metadata.zk.errors import PermissionDenied, StoreUnavailable

__all__ = ["ancestor_acl", "connect", "describe_acl", "foreign_rights", "job_acl"]

#: The rights that change a node or its children (everything but READ).
CHANGE_RIGHTS = Permissions.WRITE | Permissions.CREATE | Permissions.DELETE | Permissions.ADMIN
_LETTERS = (
    (Permissions.CREATE, "c"),
    (Permissions.DELETE, "d"),
    (Permissions.READ, "r"),
    (Permissions.WRITE, "w"),
    (Permissions.ADMIN, "a"),
)


def _split_auth(auth: str) -> tuple[str, str]:
    user, sep, password = auth.partition(":")
    if not sep or not user:
        raise ValueError("auth must be 'user:password'")
    return user, password


def job_acl(auth: str) -> list[ACL]:
    """The ACL of every node of a job: full rights for the digest user ``auth`` ("user:password"),
    or open (world: all) when ``auth`` is empty."""
    if not auth:
        return list(OPEN_ACL_UNSAFE)
    user, password = _split_auth(auth)
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
) -> KazooClient:
    """Build and start a KazooClient.

    ``auth`` ("user:password") adds digest credentials and makes the digest ACL the client's
    default ACL; ``use_ssl``/``ca``/``certfile``/``keyfile``/``verify_certs`` pass through to
    kazoo. The connection is retried for ever (every 0.1 s to 1 s), so the client rides out a
    server restart; the first connection must succeed within ``connect_timeout_s`` or
    :class:`StoreUnavailable` is raised.
    """
    auth_data = [("digest", auth)] if auth else None
    if auth:
        _split_auth(auth)
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
    )
    log = structlog.get_logger("metadata.zk").bind(hosts=hosts, use_ssl=use_ssl)
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
