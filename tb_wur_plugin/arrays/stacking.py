"""Which small arrays a framework reduces together: those of one shape and dtype, stacked as
the rows of one array (one reduction a stack, not one an array). Pure Python over the
arrays' shapes and dtypes; TensorFlow's write path, the JAX math and the PyTorch snapshot
share it."""

from __future__ import annotations

from collections.abc import Hashable, Sequence


def stacks_by_shape(
    kinds: Sequence[Hashable],
    sizes: Sequence[int],
    max_member_elements: int,
    max_stack_elements: int | None = None,
) -> tuple[list[list[int]], list[int]]:
    """Groups the arrays of at most `max_member_elements` elements by kind (their shape and
    dtype), in their order, each group cut into stacks of at most `max_stack_elements`
    elements (one array alone where it holds more; None: no bound).

    Args:
      kinds: per array, what its stack shares (e.g. its shape and dtype).
      sizes: per array, its number of elements.
      max_member_elements: the arrays larger than this are not stacked.
      max_stack_elements: the most elements of a stack of several arrays; None: no bound.

    Returns:
      (the stacks: lists of indices, each ascending, in the order of their first member's
      kind's first array; the indices of the arrays not stacked, ascending).

    Raises:
      ValueError: `kinds` and `sizes` differ in length.

    Example:
      >>> stacks_by_shape(["a", "b", "a", "a", "c"], [4, 4, 4, 4, 100], 10, 8)
      ([[0, 2], [3], [1]], [4])
    """
    if len(kinds) != len(sizes):
        raise ValueError(f"{len(kinds)} kinds for {len(sizes)} sizes")
    groups: dict[Hashable, list[int]] = {}
    large = []
    for index, (kind, size) in enumerate(zip(kinds, sizes)):
        if size > max_member_elements:
            large.append(index)
        else:
            groups.setdefault(kind, []).append(index)
    if max_stack_elements is None:
        return list(groups.values()), large
    stacks = []
    for members in groups.values():
        per_stack = max(1, max_stack_elements // max(1, sizes[members[0]]))
        stacks.extend(members[i:i + per_stack] for i in range(0, len(members), per_stack))
    return stacks, large
