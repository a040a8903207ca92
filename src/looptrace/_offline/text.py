"""Text from files made safe for a terminal: every character a terminal would act on, escaped."""

from __future__ import annotations

_NAMED = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def escaped(text: str) -> str:
    r"""Return `text` with every non-printable character as a Python-style escape.

    Control characters (escape sequences, carriage returns, NUL, newlines), format characters
    (bidirectional overrides, zero-width joiners), separators other than the space and lone
    surrogates become `\n`, `\x1b`, `\u202e` …; a backslash is doubled, so two different
    names never look alike. Printable text, non-ASCII letters included, is left as it is.
    """
    if text.isprintable() and "\\" not in text:
        return text
    return "".join(_escape(c) for c in text)


def _escape(char: str) -> str:
    if char in _NAMED:
        return _NAMED[char]
    if char.isprintable():
        return char
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def one_line(text: str, limit: int = 200) -> str:
    """Return `escaped(text)` cut to at most `limit` characters."""
    flat = escaped(text)
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
