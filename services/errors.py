"""One exception hierarchy whose messages are written for users.

Every error the services raise on purpose derives from :class:`PrimeTrainError`; its ``str`` is a
sentence a user can act on and ``hint`` says what to try next.
"""

from __future__ import annotations


class PrimeTrainError(Exception):
    """Base class: ``str(err)`` is the one-line reason, ``err.hint`` the next step."""

    hint: str = ""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        if hint:
            self.hint = hint


class SettingsError(PrimeTrainError):
    """pods.toml or another settings file is unreadable or malformed."""


class AuditWriteError(PrimeTrainError, OSError):
    """A record did not land in the rentals' audit log (disk full, read-only, gone): what it records (a
    rental, a budget, a termination) is not known to the app. Also an OSError, for the handlers of file errors."""


class PodSpecError(PrimeTrainError):
    """A POD argument that is neither a known name, an ssh alias nor user@host[:port]."""


class ConnectError(PrimeTrainError):
    """The pod could not be reached (DNS, refused, timeout, connection lost)."""


class AuthError(ConnectError):
    """The pod answered but refused every key we offered."""


class HostKeyError(ConnectError):
    """The pod's host key is not trusted. ``key_line`` is the known_hosts line it would need."""

    def __init__(
        self,
        message: str,
        *,
        host: str,
        port: int,
        fingerprint: str,
        key_type: str,
        key_line: str,
        known_hosts_file: str,
        hint: str = "",
    ) -> None:
        super().__init__(message, hint)
        self.host = host
        self.port = port
        self.fingerprint = fingerprint
        self.key_type = key_type
        self.key_line = key_line
        self.known_hosts_file = known_hosts_file


class HostKeyUnknown(HostKeyError):
    """First contact: the key is in no known_hosts file. Trust only on the user's word."""


class HostKeyChanged(HostKeyError):
    """known_hosts holds a different key for this host: possible man-in-the-middle. Never trusted."""


class HostKeyRevoked(ConnectError):
    """The pod presents a key marked ``@revoked`` in known_hosts. Deliberately NOT a :class:`HostKeyError`:
    those carry a key the user may be asked to trust, and a revoked key is never offered."""

    def __init__(
        self, message: str, *, host: str, port: int, fingerprint: str, known_hosts_file: str, hint: str = ""
    ) -> None:
        super().__init__(message, hint)
        self.host = host
        self.port = port
        self.fingerprint = fingerprint
        self.known_hosts_file = known_hosts_file


class ProbeError(PrimeTrainError):
    """The probe could not be started on the pod (no python3, upload failed, ...)."""


class ProbeFormatError(PrimeTrainError):
    """A probe line that is not a valid version-1 sample."""


class PodUnsupported(PrimeTrainError):
    """The pod lacks something monitoring needs, and trying again changes nothing until the user changes the
    pod or how it is reached. The monitor does not retry it in a loop."""


class ExecRefused(PodUnsupported, ConnectError):
    """The SSH endpoint logs in but runs no commands (an interactive-shell-only proxy, e.g. RunPod's basic SSH)."""


class PythonMissing(PodUnsupported, ProbeError):
    """The pod has no ``python3``, or one older than the pod-side scripts need."""


class UnsafeProbeDir(PodUnsupported, ProbeError):
    """The pod's ``probe_dir`` is not private to the SSH user (shared, another user's, a symbolic link):
    nothing we upload is run from it, since another user of the pod could make it run as ours."""
