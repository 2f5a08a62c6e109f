"""What the Kubernetes API server accepts in the fields an executor pod template sets, checked
before the template is written (else the API server refuses the pod only when Spark creates an
executor, far from the command that made the template). Pure functions: each returns why a
value is refused, or None.

- a container name: a DNS-1123 label (``[a-z0-9]([-a-z0-9]*[a-z0-9])?``, at most 63);
- a ServiceAccount name: a DNS-1123 subdomain (labels joined by ``.``, at most 253);
- a label key: ``[prefix/]name`` (prefix a DNS-1123 subdomain; name at most 63 of
  ``[A-Za-z0-9._-]``, alphanumeric at both ends); a label value: empty or such a name;
- an image reference: printable, no whitespace;
- a node folder for ``hostPath``: absolute, normalized (no ``.``, ``..`` or ``//``), printable,
  and not a system folder of the node (``/etc``, ``/usr``, ``/var/lib``...), which the init
  container would hand to the executor's user.
"""

from __future__ import annotations

import re

__all__ = [
    "container_name_problem",
    "host_path_problem",
    "image_problem",
    "label_problem",
    "service_account_problem",
]

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_LABEL = re.compile(rf"{_LABEL}\Z")
_DNS_SUBDOMAIN = re.compile(rf"{_LABEL}(\.{_LABEL})*\Z")
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]\Z")
#: Node folders (and, for the first group, everything below them) never handed to a pod.
_SYSTEM_TREES = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32",
                 "/proc", "/root", "/run", "/sbin", "/sys", "/usr")  # fmt: skip
_SYSTEM_FOLDERS = frozenset({"/home", "/media", "/mnt", "/opt", "/srv", "/tmp", "/var", "/var/lib",
                             "/var/log", "/var/run", "/var/tmp", "/var/lib/kubelet"})  # fmt: skip


def _dns_label_problem(what: str, value: str) -> str | None:
    if len(value) > 63 or not _DNS_LABEL.match(value):
        return (
            f"{what} must be a DNS-1123 label (lower-case letters, digits and '-', "
            f"alphanumeric at both ends, at most 63 characters), got {value!r:.80}"
        )
    return None


def _subdomain_problem(what: str, value: str) -> str | None:
    if len(value) > 253 or not _DNS_SUBDOMAIN.match(value):
        return (
            f"{what} must be a DNS-1123 subdomain (lower-case letters, digits, '-' and '.', "
            f"at most 253 characters), got {value!r:.80}"
        )
    return None


def container_name_problem(value: str) -> str | None:
    return _dns_label_problem("container name", value)


def service_account_problem(value: str) -> str | None:
    return _subdomain_problem("service account", value)


def _name_problem(what: str, value: str) -> str | None:
    if len(value) > 63 or not _QUALIFIED_NAME.match(value):
        return (
            f"{what} must be at most 63 characters of letters, digits, '-', '_' and '.', "
            f"alphanumeric at both ends, got {value!r:.80}"
        )
    return None


def label_problem(key: str, value: str) -> str | None:
    """Why ``key=value`` is not a Kubernetes label, or None."""
    prefix, slash, name = key.rpartition("/")
    if slash:
        problem = _subdomain_problem(f"label key prefix of {key!r:.80}", prefix)
        if problem is not None:
            return problem
    problem = _name_problem(f"label key {key!r:.80}", name)
    if problem is None and value:
        problem = _name_problem(f"label value of {key!r:.80}", value)
    return problem


def image_problem(value: str) -> str | None:
    if not value or not value.isprintable() or any(c.isspace() for c in value):
        return f"image must be a reference without spaces (e.g. busybox:1.36), got {value!r:.80}"
    return None


def host_path_problem(what: str, path: str) -> str | None:
    """Why ``path`` may not be the state's folder (``what`` names it), or None."""
    if not path.isprintable():
        return f"{what} must be printable (no control characters), got {path!r:.80}"
    trimmed = path.rstrip("/") if path != "/" else path
    if not trimmed.startswith("/") or trimmed == "/":
        return f"{what} must be an absolute path below /, got {path!r:.80}"
    if any(part in ("", ".", "..") for part in trimmed.split("/")[1:]):
        return f"{what} must be a normalized path (no '.', '..' or '//'), got {path!r:.80}"
    below = any(trimmed == tree or trimmed.startswith(tree + "/") for tree in _SYSTEM_TREES)
    if below or trimmed in _SYSTEM_FOLDERS:
        return f"{what} must not be a system folder of the node, got {path!r:.80}"
    return None
