"""torch_internals.foreach: the `torch._foreach_*` ops it wraps exist in this PyTorch and do
what the wrappers say (a PyTorch release that removes or changes one fails here, by name)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tb_wur_plugin.torch_internals import foreach  # noqa: E402


@pytest.mark.parametrize("name", foreach.NAMES)
def test_the_private_op_exists(name):
    assert callable(getattr(torch, name, None)), (
        f"torch.{name} is gone in torch {torch.__version__}: "
        "tb_wur_plugin/torch_internals/foreach.py needs another way to do it"
    )


def _tensors():
    generator = torch.Generator().manual_seed(0)
    return [torch.randn(shape, generator=generator, dtype=dtype)
            for shape, dtype in [((3, 4), torch.float32), ((70_000,), torch.float32),
                                 ((2, 2, 2), torch.float64), ((1,), torch.float32)]]


def test_norms_are_the_norms_of_all_elements():
    tensors = _tensors()
    got = foreach.norms(tensors)
    assert len(got) == len(tensors)
    for tensor, norm in zip(tensors, got):
        assert norm.shape == () and norm.dtype == tensor.dtype, "torch._foreach_norm changed"
        torch.testing.assert_close(norm, torch.linalg.vector_norm(tensor))


def test_sub_subtracts_in_place():
    targets, others = _tensors(), [t * 0.5 for t in _tensors()]
    want = [t - o for t, o in zip(targets, others)]
    storages = [t.data_ptr() for t in targets]
    foreach.sub_(targets, others)
    assert [t.data_ptr() for t in targets] == storages, "torch._foreach_sub_ not in place"
    for got, expected in zip(targets, want):
        assert torch.equal(got, expected), "torch._foreach_sub_ changed"


def test_copy_writes_in_place_converting_dtypes():
    sources = [t.to(torch.float16) if t.dtype == torch.float32 else t for t in _tensors()]
    targets = [torch.zeros_like(t, dtype=torch.float64 if t.dtype == torch.float64
                                else torch.float32) for t in sources]
    storages = [t.data_ptr() for t in targets]
    foreach.copy_(targets, sources)
    assert [t.data_ptr() for t in targets] == storages, "torch._foreach_copy_ not in place"
    for target, source in zip(targets, sources):
        assert torch.equal(target, source.to(target.dtype)), "torch._foreach_copy_ changed"
    foreach.copy_([], [])  # nothing to copy: no call


def test_copies_are_new_equal_tensors():
    tensors = [t for t in _tensors() if t.dtype == torch.float32]
    got = foreach.copies(tensors)
    for tensor, copy in zip(tensors, got):
        assert torch.equal(copy, tensor) and copy.dtype == tensor.dtype
        assert copy.data_ptr() != tensor.data_ptr(), "torch._foreach_mul returned its input"
