"""The base classes of monolock's exceptions, apart from errors.py so that the
generated class of each code (_errors_gen.py) can derive from them before
errors.py maps codes to classes. monolock.errors exports them."""

from __future__ import annotations

from ._constants_gen import FIRST_TERMINAL_CODE

__all__ = [
    "FIRST_TERMINAL_CODE",
    "KnownServerError",
    "MonolockError",
    "ServerError",
    "is_temporary_code",
]

# FIRST_TERMINAL_CODE: codes below it are server conditions a new connection
# may cure; codes from it on are terminal. The split is a range so that codes
# unknown to this version are classified too.


def is_temporary_code(code: int) -> bool:
    """Tell whether a wire error code is temporary (``code < 0x10``)."""
    return code < FIRST_TERMINAL_CODE


class MonolockError(Exception):
    """Base class of every monolock exception.

    ``code`` is the wire error code behind the exception, or ``None`` when
    there is none (timeouts, connection failures). ``temporary`` tells whether
    a new attempt may succeed.
    """

    __module__ = "monolock.errors"  # where users import it from
    code: int | None = None
    temporary: bool = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ServerError(MonolockError):
    """An ERROR code of the protocol.

    Raised when the server sends an ERROR frame (``from_server`` is true) or,
    for invalid names and leases, by the client itself before sending any
    byte, with the same class and code the server would have sent
    (``from_server`` is false). ``reason`` is the server's text (or the
    canonical text); branch on the class or ``code``, never on the text.
    """

    __module__ = "monolock.errors"
    text: str = "unknown error"
    """Canonical text of the code."""

    def __init__(self, code: int, reason: str = "", *, from_server: bool = True) -> None:
        self.code = code
        self.temporary = is_temporary_code(code)
        self.reason = reason or self.text
        self.from_server = from_server
        super().__init__(f"monolock: {_describe(code, reason, self.text)} (0x{code:02x})")


_NOT_ACTIVE_CODE = 0x03
"""NOT_ACTIVE: a passive server of an HA cell; its reason is an address."""


def _describe(code: int, reason: str, text: str) -> str:
    """What a message says before the code (spec/vectors/messages.json):
    the reason, or the canonical text when it is empty. The reason of 0x03
    is the active server's address, not a sentence, so the canonical text
    leads and names it."""
    if code == _NOT_ACTIVE_CODE and reason:
        return f"{_canonical(code)}; the active server is {reason}"
    return reason or text


def _canonical(code: int) -> str:
    # Imported here: _errors_gen derives its classes from this module.
    from ._errors_gen import CODE_CLASSES

    return next((cls.text for cls in CODE_CLASSES if cls.code == code), ServerError.text)


class KnownServerError(ServerError):
    """A ServerError whose class fixes the code."""

    code: int  # set by each class of _errors_gen.py

    def __init__(self, reason: str = "", *, from_server: bool = True) -> None:
        super().__init__(type(self).code or 0, reason, from_server=from_server)
