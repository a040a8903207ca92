"""Functions wrapped as section entries: plain, `async def`, generator and async generator.

Kept apart from `timer` so that the hot path can be compiled: the wrappers are closures over
the user's function (async generators among them), which stay interpreted.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import AsyncGenerator, Awaitable, Callable, Coroutine, Generator
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, cast

if TYPE_CHECKING:
    from looptrace._core.timer import Timer

P = ParamSpec("P")
R = TypeVar("R")


def wrap(func: Callable[P, R], owner: Timer, timer: Timer) -> Callable[P, R]:
    """Wrap `func` so that every call is one entry of section `timer` of `owner`.

    For an `async def`, a generator or an async generator function the entry spans the
    whole call: every await, or the iteration until the generator is exhausted or closed.
    """
    if inspect.iscoroutinefunction(func):
        return cast("Callable[P, R]", _wrap_coroutine(func, owner, timer))
    if inspect.isasyncgenfunction(func):
        return cast("Callable[P, R]", _wrap_async_generator(func, owner, timer))
    if inspect.isgeneratorfunction(func):
        return cast("Callable[P, R]", _wrap_generator(func, owner, timer))

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        interval = owner._enter(timer, hold=False)
        try:
            result = func(*args, **kwargs)
        except BaseException as error:
            if interval is not None:
                owner._exit(timer, interval, error)
            raise
        if interval is not None:
            owner._exit(timer, interval, None)
        return result

    return wrapper


def _wrap_coroutine(
    func: Callable[P, Coroutine[Any, Any, Any]], owner: Timer, timer: Timer
) -> Callable[P, Coroutine[Any, Any, Any]]:
    @functools.wraps(func)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> Any:
        interval = owner._enter(timer, hold=False)
        try:
            result = await func(*args, **kwargs)
        except BaseException as error:
            if interval is not None:
                owner._exit(timer, interval, error)
            raise
        if interval is not None:
            owner._exit(timer, interval, None)
        return result

    return wrapper


def _wrap_generator(
    func: Callable[P, Generator[Any, Any, Any]], owner: Timer, timer: Timer
) -> Callable[P, Generator[Any, Any, Any]]:
    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> Generator[Any, Any, Any]:
        interval = owner._enter(timer, hold=False)
        try:
            result = yield from func(*args, **kwargs)
        except GeneratorExit:  # closed early by its consumer: not an error
            if interval is not None:
                owner._exit(timer, interval, None)
            raise
        except BaseException as error:
            if interval is not None:
                owner._exit(timer, interval, error)
            raise
        if interval is not None:
            owner._exit(timer, interval, None)
        return result

    return wrapper


def _wrap_async_generator(
    func: Callable[P, AsyncGenerator[Any, Any]], owner: Timer, timer: Timer
) -> Callable[P, AsyncGenerator[Any, Any]]:
    @functools.wraps(func)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> AsyncGenerator[Any, Any]:
        interval = owner._enter(timer, hold=False)
        try:
            # `yield from` for an async generator, which the language lacks: what the
            # consumer sends (`asend`) or throws in (`athrow`) reaches `inner`, and closing
            # the wrapper closes `inner` at once.
            inner = func(*args, **kwargs)
            step: Awaitable[Any] = inner.asend(None)
            while True:
                try:
                    item = await step
                except StopAsyncIteration:
                    break
                try:
                    sent = yield item
                except GeneratorExit:
                    await inner.aclose()
                    raise
                except BaseException as thrown:
                    step = inner.athrow(thrown)
                else:
                    step = inner.asend(sent)
        except GeneratorExit:  # closed early by its consumer: not an error
            if interval is not None:
                owner._exit(timer, interval, None)
            raise
        except BaseException as error:
            if interval is not None:
                owner._exit(timer, interval, error)
            raise
        if interval is not None:
            owner._exit(timer, interval, None)

    return wrapper
