"""The values users pass, by HTTP query parameter or on the command line, checked alike, and
names as error messages show them.

Each function takes the text as given and returns its value, or raises ValueError with the
reason as a phrase ("must be an integer, got 'x'") that the caller prefixes with the
argument's name and turns into its own error (HTTP 400, an argparse usage error).
"""

from __future__ import annotations

import math


def integer(text: str, low: int | None = None, high: int | None = None) -> int:
    """`text` as a decimal integer in [low, high] (None: unbounded on that side).

    Raises:
        ValueError: `text` is not a decimal integer, or it is outside [low, high].
    """
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"must be an integer, got {shown(text, 40)}") from None
    if (low is not None and value < low) or (high is not None and value > high):
        if high is None:
            bound = f"at least {low}"
        elif low is None:
            bound = f"at most {high}"
        else:
            bound = f"in [{low}, {high}]"
        raise ValueError(f"must be {bound}, got {shown(text, 40)}")
    return value


def positive_number(text: str) -> float:
    """`text` as a positive finite number (a ratio, a learning-rate target).

    Raises:
        ValueError: `text` is not a number, or it is not positive and finite.
    """
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"must be a number, got {shown(text, 40)}") from None
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"must be a positive finite number, got {shown(text, 40)}")
    return value


def shown(name: str, limit: int = 100) -> str:
    """`name` for an error message.

    Args:
        name: a run, tag or parameter value, as the request, the command line or the data
            gave it.
        limit: the most characters returned.

    Returns:
        `name` quoted and escaped (one line), cut to `limit` characters.
    """
    text = repr(name)
    return text if len(text) <= limit else text[: limit - 3] + "..."
