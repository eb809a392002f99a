"""`arrays.stacking.stacks_by_shape`: which small arrays the TensorFlow and JAX paths reduce
together (their ratios are checked through those paths in test_ratios.py and test_jax.py)."""

import pytest

from tb_wur_plugin.arrays.stacking import stacks_by_shape


def test_small_arrays_of_a_kind_are_stacked_in_order_and_large_ones_apart():
    kinds = ["k", "b", "k", "big", "b", "k", "odd"]
    sizes = [64, 8, 64, 1000, 8, 64, 3]
    stacks, large = stacks_by_shape(kinds, sizes, max_member_elements=100)
    assert stacks == [[0, 2, 5], [1, 4], [6]] and large == [3]


def test_a_bound_cuts_each_kind_into_stacks_of_at_most_that_many_elements():
    kinds = ["k"] * 7 + ["b"] * 3 + ["wide"]
    sizes = [64] * 7 + [8] * 3 + [300]
    stacks, large = stacks_by_shape(kinds, sizes, max_member_elements=1000,
                                    max_stack_elements=200)
    # three 64-element arrays a stack (192 <= 200); one wider than the bound stands alone
    assert stacks == [[0, 1, 2], [3, 4, 5], [6], [7, 8, 9], [10]] and large == []


def test_empty_arrays_and_an_empty_list():
    assert stacks_by_shape([], [], 10, 10) == ([], [])
    assert stacks_by_shape(["e", "e"], [0, 0], 10, 10) == ([[0, 1]], [])


def test_lengths_that_differ_are_refused():
    with pytest.raises(ValueError, match="2 kinds for 3 sizes"):
        stacks_by_shape(["a", "b"], [1, 2, 3], 10)
