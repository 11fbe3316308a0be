"""A guard for code that must not wait forever: install :func:`raise_hung` as the SIGALRM handler and catch
:class:`Hung`."""

from __future__ import annotations


class Hung(Exception):
    """The alarm fired: the code under test waited instead of returning."""


def raise_hung(*_) -> None:
    """A SIGALRM handler that turns a wait past the alarm into :class:`Hung`."""
    raise Hung
