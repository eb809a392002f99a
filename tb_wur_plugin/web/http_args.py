"""Parsing of the routes' requests: query parameters, the request's context, read-only routes.

Every bad request raises a `tensorboard.errors.PublicError` whose one-line reason TensorBoard
sends to the client: `InvalidArgumentError` (400) for a missing, repeated or malformed
parameter, 405 for a method other than GET and HEAD.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

from tensorboard import context as tb_context
from tensorboard import errors, plugin_util
from werkzeug import wrappers

from tb_wur_plugin.read import argument_values
from tb_wur_plugin.read.argument_values import shown


def request_context(request: wrappers.Request) -> tuple[tb_context.RequestContext, str]:
    """(the data provider's request context, the experiment id) of `request`."""
    return plugin_util.context(request.environ), plugin_util.experiment_id(request.environ)



def _checked(name: str, parse: Callable[..., Any], text: str, *bounds: int) -> Any:
    """`parse(text, *bounds)`, its ValueError as a 400 naming the parameter."""
    try:
        return parse(text, *bounds)
    except ValueError as e:
        raise errors.InvalidArgumentError(f"parameter {name} {e}") from None

def str_arg(request: wrappers.Request, name: str) -> str:
    """The query parameter `name`, given exactly once.

    Raises:
        errors.InvalidArgumentError: the parameter is missing or given more than once.
    """
    values = request.args.getlist(name)
    if not values:
        raise errors.InvalidArgumentError(f"missing parameter: {name}")
    if len(values) > 1:
        raise errors.InvalidArgumentError(f"parameter {name} given {len(values)} times")
    return values[0]


def int_arg(
    request: wrappers.Request,
    name: str,
    default: int | None,
    low: int = -(2**63),
    high: int = 2**63 - 1,
) -> int | None:
    """The integer query parameter `name`.

    Args:
        request: the request.
        name: the parameter's name.
        default: the value when the parameter is absent.
        low: the smallest value allowed.
        high: the largest value allowed.

    Returns:
        The parameter's value, or `default` when it is absent.

    Raises:
        errors.InvalidArgumentError: the parameter is given more than once, is not a
            decimal integer, or is outside [low, high].
    """
    if name not in request.args:
        return default
    return _checked(name, argument_values.integer, str_arg(request, name), low, high)


def ratio_arg(request: wrappers.Request, name: str, default: float) -> float:
    """The query parameter `name` as a ratio: a positive finite number.

    Args:
        request: the request.
        name: the parameter's name.
        default: the value when the parameter is absent.

    Returns:
        The parameter's value, or `default` when it is absent.

    Raises:
        errors.InvalidArgumentError: the parameter is given more than once, is not a
            number, or is not positive and finite.
    """
    if name not in request.args:
        return default
    return _checked(name, argument_values.positive_number, str_arg(request, name))


def choice_arg(
    request: wrappers.Request, name: str, default: str | None, choices: Sequence[str]
) -> str:
    """The query parameter `name`, one of `choices`.

    Args:
        request: the request.
        name: the parameter's name.
        default: the value when the parameter is absent; None: the parameter is required.
        choices: the values allowed.

    Returns:
        The parameter's value, or `default` when it is absent.

    Raises:
        errors.InvalidArgumentError: the parameter is missing (with no default), given more
            than once, or not one of `choices`.
    """
    if name not in request.args and default is not None:
        return default
    value = str_arg(request, name)
    if value not in choices:
        raise errors.InvalidArgumentError(
            f"parameter {name} must be one of {', '.join(choices)}, got {value!r:.40}"
        )
    return value


class MethodNotAllowedError(errors.PublicError):
    """405, with the header `Allow: GET, HEAD`."""

    http_code = 405

    def __init__(self, method: str):
        super().__init__(f"Method not allowed: {shown(method, 40)}; the wur routes answer GET and HEAD")
        self.headers.append(("Allow", "GET, HEAD"))


def read_only(app: Callable) -> Callable:
    """`app` (a WSGI application), answering only GET and HEAD.

    Raises:
        MethodNotAllowedError: (from the returned application) for any other method.
    """

    @functools.wraps(app)
    def wrapper(environ, start_response):
        method = environ.get("REQUEST_METHOD", "GET")
        if method not in ("GET", "HEAD"):
            raise MethodNotAllowedError(method)
        return app(environ, start_response)

    return wrapper
