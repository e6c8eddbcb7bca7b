"""Values worked out once per object, also when checks run side by side in threads.

:func:`functools.cached_property` of Python 3.11 holds one lock per property, shared by
every instance, while it computes: two threads that take two such values in opposite
orders (one computing ``a``, which needs ``b``; the other computing ``b``, which needs
``a`` of another object, or waiting for ``a``) could wait for each other forever, and
two readers could never compute the same property at once. Here a value is computed by
the first thread that asks for it, outside any lock; a second thread asking for the
same value of the same object waits for that one, and one asking for another value or
another object does not wait at all. A value is stored in the object's ``__dict__``
(as :func:`functools.cached_property` stores it), so setting it there beforehand, or
copying an object's ``__dict__``, works as before, and nothing but the values is kept
on the object (it pickles as before).

A computation that raises leaves nothing behind: the thread that waited for it computes
the value itself (and meets the same error).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar, overload

_T = TypeVar("_T")

#: Guards :data:`_PENDING`.
_LOCK = threading.Lock()
#: (id of the object, name) -> the computation under way (only while it runs, so an id
#: is never that of another object: the one being computed on is alive)
_PENDING: dict[tuple[int, str], _Computing] = {}


class _Computing:
    """One computation under way: who computes it, and the event its waiters wait for."""

    __slots__ = ("done", "thread")

    def __init__(self) -> None:
        self.thread = threading.get_ident()
        self.done = threading.Event()


def once(obj: object, name: str, make: Callable[[], _T]) -> _T:
    """``obj.__dict__[name]``, made by ``make()`` when it is not there yet.

    The first thread to ask computes it (outside any lock); a thread asking for the same
    ``name`` of the same ``obj`` meanwhile waits for that one and takes its value. The
    thread that is computing it asking again (a value that needs itself) computes it
    again, as a plain cache would.

    Examples
    --------
    >>> class Box:
    ...     pass
    >>> box = Box()
    >>> once(box, "answer", lambda: 42), once(box, "answer", lambda: 0)
    (42, 42)
    """
    held = obj.__dict__
    key = (id(obj), name)
    while True:
        try:
            return held[name]
        except KeyError:
            pass
        with _LOCK:
            if name in held:
                continue
            running = _PENDING.get(key)
            if running is None:
                running = _PENDING[key] = _Computing()
                mine = True
            else:
                mine = False
        if not mine:
            if running.thread == threading.get_ident():
                return make()  # asked again while computing it: as a plain cache would
            running.done.wait()
            continue  # its value; or, when that computation raised, computed here
        try:
            value = make()
            held[name] = value
            return value
        finally:
            with _LOCK:
                del _PENDING[key]
            running.done.set()


class cached(Generic[_T]):
    """A property computed once per object by :func:`once` (a thread-safe
    :func:`functools.cached_property` whose lock is per object and value).

    Examples
    --------
    >>> class Area:
    ...     @cached
    ...     def size(self) -> int:
    ...         print("computed")
    ...         return 3
    >>> a = Area()
    >>> a.size
    computed
    3
    >>> a.size
    3
    """

    def __init__(self, func: Callable[[Any], _T]) -> None:
        self.func = func
        self.name = func.__name__
        self.__doc__ = func.__doc__
        self.__module__ = func.__module__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, instance: None, owner: type | None = None) -> cached[_T]: ...

    @overload
    def __get__(self, instance: object, owner: type | None = None) -> _T: ...

    def __get__(self, instance: object | None, owner: type | None = None) -> _T | cached[_T]:
        if instance is None:
            return self
        return once(instance, self.name, lambda: self.func(instance))
