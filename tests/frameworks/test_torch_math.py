"""arrays/torch_math: histogram bucketing by the values' bits against the `bucketize` on the
edges that it replaced (and the numpy reference), on adversarial values; the snapshot that
reuses the last logged step's copy."""

from __future__ import annotations

import gc
import math
import weakref

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tb_wur_plugin import metadata  # noqa: E402
from tb_wur_plugin import torch as wur_torch  # noqa: E402
from tb_wur_plugin.arrays import numpy_math, torch_math  # noqa: E402
from tb_wur_plugin.torch_internals import foreach  # noqa: E402

INT_OF = {torch.float32: torch.int32, torch.float64: torch.int64}


def bucketize_counts(values):
    """The implementation the bit tables replaced: one `torch.bucketize` on [smallest
    positive, edges..., +inf] in the values' dtype, NaN and negative values to NAN_BUCKET."""
    dtype = values.dtype
    smallest = torch.nextafter(torch.zeros(1, dtype=dtype), torch.ones(1, dtype=dtype))
    boundaries = torch.cat([smallest, torch.tensor(metadata.HISTOGRAM_EDGES, dtype=dtype),
                            torch.full((1,), math.inf, dtype=dtype)])
    values = values.reshape(-1)
    ids = torch.bucketize(values, boundaries, right=True)
    ids = torch.where(values >= 0, ids, metadata.NAN_BUCKET)
    return torch.bincount(ids, minlength=metadata.NUM_BUCKETS)


def old_elementwise_counts(before, after):
    """The elementwise counts as computed before: where(Δw = 0, 0, |Δw / w|), bucketized."""
    delta = after.reshape(-1) - before.reshape(-1)
    return bucketize_counts(torch.where(delta == 0, 0.0, delta.div_(before.reshape(-1)).abs_()))


def adversarial(dtype):
    """Values on, just below and just above every edge, the bits around each boundary of
    every fine bin of the tables, +-0, +-inf, NaNs of both signs and other payloads, negative
    values, subnormals, the largest finite value, and random bits."""
    int_dtype = INT_OF[dtype]
    info = torch.iinfo(int_dtype)
    edges = torch.tensor(metadata.HISTOGRAM_EDGES, dtype=dtype)
    # the bits either side of every fine bin's start (the tables' bins: the sign, the
    # exponent and 3 bits of the mantissa)
    shift = {torch.float32: 20, torch.float64: 49}[dtype]
    starts = torch.arange(-(1 << (info.bits - shift - 1)), 1 << (info.bits - shift - 1),
                          dtype=torch.int64) << shift
    around = torch.cat([starts, starts - 1, starts + 1]).clamp(info.min, info.max)
    generator = torch.Generator().manual_seed(3)
    random_bits = torch.randint(info.min, info.max, (200_000,), generator=generator,
                                dtype=torch.int64)
    bits = torch.cat([around, random_bits]).to(int_dtype).view(dtype)
    tiny = torch.finfo(dtype).tiny
    special = torch.tensor([0.0, -0.0, math.inf, -math.inf, math.nan, -math.nan, -1.0,
                            tiny, tiny / 2, -tiny / 2, torch.finfo(dtype).max, 1e-12, 1e3],
                           dtype=dtype)
    smallest = torch.nextafter(torch.zeros(1, dtype=dtype), torch.ones(1, dtype=dtype))
    return torch.cat([
        edges, torch.nextafter(edges, torch.zeros_like(edges)),
        torch.nextafter(edges, torch.full_like(edges, math.inf)), special, smallest, bits,
    ])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_bucketing_by_bits_is_the_bucketize_on_the_edges(dtype):
    values = adversarial(dtype)
    got = torch_math.bucket_counts(values)
    assert torch.equal(got, bucketize_counts(values))
    np.testing.assert_array_equal(got.numpy(), numpy_math.bucket_counts(values.numpy()))
    for value in adversarial(dtype)[:2000]:  # each value alone: its own bucket
        one = value.reshape(1)
        assert torch.equal(torch_math.bucket_counts(one), bucketize_counts(one)), value


def test_other_dtypes_are_bucketized_in_their_precision():
    values = torch.tensor([0.0, 1e-3, 2.0, 100.0, math.inf, math.nan, -1.0],
                          dtype=torch.float16)
    assert torch.equal(torch_math.bucket_counts(values), bucketize_counts(values))


def _weights_and_updates(dtype):
    """Weights and their updated values, with 0/0 (both ±0), Δw = 0 at nonzero w, w = 0
    moving (+inf), NaN and inf weights and updates, sign changes, and tiny updates."""
    generator = torch.Generator().manual_seed(1)
    n = 300_001
    w = torch.randn(n, generator=generator, dtype=dtype)
    w[::7] = 0.0
    w[3::7] = -0.0
    w[::11] = math.nan
    w[::13] = math.inf
    w[5::31] = torch.finfo(dtype).tiny / 4
    new = w + torch.randn(n, generator=generator, dtype=dtype) * 1e-3
    new[::3] = w[::3]
    new[::14] = 0.0
    new[1::19] = -0.0
    new[::23] = math.inf
    new[::29] = math.nan
    new[2::37] = -w[2::37]
    new[4::41] = w[4::41] * (1 + torch.finfo(dtype).eps)
    return w, new


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("chunk", [None, 1000])
def test_elementwise_counts_are_the_old_ones(dtype, chunk, monkeypatch):
    if chunk is not None:  # several chunks, the last one short
        monkeypatch.setattr(torch_math, "HISTOGRAM_CPU_CHUNK_ELEMENTS", chunk)
    w, new = _weights_and_updates(dtype)
    got = torch_math.elementwise_counts(w, new)
    assert torch.equal(got, old_elementwise_counts(w.clone(), new))
    assert got[metadata.NAN_BUCKET] > 0 and got[metadata.ZERO_BUCKET] > 0
    finite = torch.isfinite(w) & torch.isfinite(new)  # no NaN bucket: the count is not read
    got = torch_math.elementwise_counts(w[finite], new[finite])
    assert got[metadata.NAN_BUCKET] == 0
    assert torch.equal(got, old_elementwise_counts(w[finite].clone(), new[finite]))


def test_zero_over_zero_is_zero():
    w = torch.tensor([0.0, -0.0, 0.0, -0.0, 0.0, 1.0])
    new = torch.tensor([0.0, 0.0, -0.0, -0.0, 1.0, 1.0])
    counts = torch_math.elementwise_counts(w, new)
    assert counts[metadata.ZERO_BUCKET] == 5 and counts[metadata.INF_BUCKET] == 1


def test_snapshot_reuses_what_fits():
    a, b = torch.randn(3, 4), torch.randn(5, dtype=torch.float64)
    first = torch_math.snapshot([a, b], [])
    assert all(torch.equal(c, t) for c, t in zip(first, [a, b]))
    assert first[0].data_ptr() != a.data_ptr()
    a.add_(1.0)
    second = torch_math.snapshot([a, b], first)
    assert [t.data_ptr() for t in second] == [t.data_ptr() for t in first]  # reused
    assert torch.equal(second[0], a)
    # a 16-bit tensor: copied into the float32 copy of its shape, converted
    half = torch.randn(3, 4, dtype=torch.float16)
    third = torch_math.snapshot([half, b], second)
    assert third[0] is second[0] and torch.equal(third[0], half.float())
    # dtype, shape or layout changed: a new copy there, the rest reused
    double, wide = torch.randn(3, 4, dtype=torch.float64), torch.randn(4, 3).t()
    fourth = torch_math.snapshot([double, b], third)
    assert fourth[0] is not third[0] and fourth[0].dtype == torch.float64
    assert torch.equal(fourth[0], double) and fourth[1] is third[1]
    fifth = torch_math.snapshot([wide, b[:2]], fourth)
    assert fifth[0] is not fourth[0] and torch.equal(fifth[0], wide)
    assert fifth[0].stride() == wide.stride() and fifth[1] is not fourth[1]
    z = torch.randn(2, 3, dtype=torch.complex64)
    sixth = torch_math.snapshot([z], [])
    assert torch.equal(sixth[0], torch.view_as_real(z))
    z.mul_(2)
    seventh = torch_math.snapshot([z], sixth)
    assert seventh[0] is sixth[0] and torch.equal(seventh[0], torch.view_as_real(z))


def test_snapshot_stacks_small_copies_of_a_shape_and_sums_them_a_stack_at_a_time(monkeypatch):
    """Small contiguous tensors of one shape and work dtype, at least MIN_STACK_MEMBERS of
    them, are copied as the rows of one tensor; the sums of squares of the snapshot (stacked
    rows and the rest) are those of its copies one by one, before and after the copies
    change in place, after a snapshot that reuses them, and after one whose tensor no
    longer fits drops it from its stack."""
    monkeypatch.setattr(torch_math, "MIN_STACK_MEMBERS", 3)
    g = torch.Generator().manual_seed(3)
    tensors = [torch.randn(8, 4, generator=g) for _ in range(5)]  # one stack
    tensors += [torch.randn(6, generator=g, dtype=torch.float64) for _ in range(3)]  # another
    tensors += [torch.randn(3, generator=g),  # alone of its shape: loose
                torch.randn(300, 300, generator=g),  # above one chunk: loose
                torch.randn(4, 8, generator=g).t(),  # not contiguous: loose
                torch.randn(8, 4, generator=g, dtype=torch.float16),  # converted: loose
                torch.randn(2, 2, generator=g), torch.randn(2, 2, generator=g)]  # too few
    first = torch_math.snapshot(tensors, [])
    assert all(torch.equal(c, torch_math.work(t)) for c, t in zip(first, tensors))
    assert sorted(sorted(s.members) for s in first.stacks) == [[0, 1, 2, 3, 4], [5, 6, 7]]
    assert first.loose == [8, 9, 10, 11, 12, 13]
    assert first[0].data_ptr() != tensors[0].data_ptr()

    def each(snapshot):  # one by one, no stacks
        return torch_math.sums_of_squares(list(snapshot))

    for step in range(2):
        np.testing.assert_allclose(torch_math.sums_of_squares(first).numpy(),
                                   each(first).numpy(), rtol=1e-6)
        foreach.sub_(list(first), [t.to(c.dtype) * 0.5 for c, t in zip(first, tensors)])
    for t in tensors:
        t.mul_(2.0)
    second = torch_math.snapshot(tensors, first)
    assert second is first  # every copy reused: the same snapshot, written in place
    assert [c.data_ptr() for c in second] == [c.data_ptr() for c in first]
    np.testing.assert_allclose(torch_math.sums_of_squares(second).numpy(),
                               [float((t.double() ** 2).sum()) for t in tensors], rtol=1e-6)
    # tensor 2 is now float64: a new copy; its stale row is no member's any more
    tensors[2] = torch.randn(8, 4, generator=g, dtype=torch.float64) * 1e3
    third = torch_math.snapshot(tensors, second)
    assert third[2] is not second[2] and third[0] is second[0]
    assert sorted(sorted(s.members) for s in third.stacks) == [[0, 1, 3, 4], [5, 6, 7]]
    assert third.loose == [2, 8, 9, 10, 11, 12, 13]
    np.testing.assert_allclose(torch_math.sums_of_squares(third).numpy(),
                               [float((t.double() ** 2).sum()) for t in tensors], rtol=1e-6)


def test_stacked_copies_larger_than_a_chunk_are_summed_a_chunk_at_a_time(monkeypatch):
    """Copies of more than CHUNK_ELEMENTS elements (up to MAX_STACKED_ELEMENTS) are stacked
    too; each row's Σx² is taken a chunk at a time, in equal parts where they divide the
    row (50,000 = 2 × 25,000), else a chunk and the rest (40,011): within 1e-5 of numpy's
    float64 sums, for values of one magnitude (±1e-3, float32's worst case) as for normal
    ones."""
    monkeypatch.setattr(torch_math, "MIN_STACK_MEMBERS", 3)
    g = torch.Generator().manual_seed(5)
    tensors = [torch.randn(200, 250, generator=g) for _ in range(4)]
    tensors += [(torch.randint(0, 2, (3, 13_337), generator=g).float() * 2 - 1) * 1e-3
                for _ in range(3)]
    assert torch_math.CHUNK_ELEMENTS < 40_011 < 50_000 <= torch_math.MAX_STACKED_ELEMENTS
    snapshot = torch_math.snapshot(tensors, [])
    assert sorted(sorted(s.members) for s in snapshot.stacks) == [[0, 1, 2, 3], [4, 5, 6]]
    assert snapshot.loose == []
    np.testing.assert_allclose(torch_math.sums_of_squares(snapshot).numpy(),
                               [float(np.sum(t.double().numpy() ** 2)) for t in tensors],
                               rtol=1e-5)


def test_checked_norms_of_a_snapshot_take_the_maxima_a_stack_at_a_time(monkeypatch):
    """The tensors whose sums of squares need an exact norm (0: did not move or underflowed,
    +inf: overflowed) have their max|x| taken together, stacked ones a stack at a time: the
    norms are those taken one tensor at a time, for zero, underflowing (1e-25), overflowing
    (1e30), infinite, NaN, empty and normal tensors, stacked and loose, float32 and float64."""
    monkeypatch.setattr(torch_math, "MIN_STACK_MEMBERS", 3)
    g = torch.Generator().manual_seed(9)
    tensors = [torch.zeros(4, 5), torch.randn(4, 5, generator=g) * 1e-25,
               torch.randn(4, 5, generator=g) * 1e30, torch.zeros(4, 5),
               torch.randn(4, 5, generator=g), torch.full((4, 5), math.inf)]  # one stack
    tensors[4][1, 2] = math.nan
    tensors += [torch.zeros(7), torch.zeros(0), torch.randn(3, generator=g) * 1e-25,
                torch.randn(6, dtype=torch.float64, generator=g) * 1e-170,
                torch.randn(2, 2, generator=g)]  # loose
    snapshot = torch_math.snapshot(tensors, [])
    assert [s.members for s in snapshot.stacks] == [[0, 1, 2, 3, 4, 5]]
    sums = torch_math.sums_of_squares(snapshot).numpy()
    assert torch_math.needs_exact_norm(sums).sum() == 9
    one_by_one = torch_math.checked_norms(sums, lambda i: snapshot[i])
    together = torch_math.checked_norms(sums, snapshot)
    np.testing.assert_array_equal(together, one_by_one)

    def reference(t):  # numpy, float64, scaled by max|x|
        x = t.double().numpy().ravel()
        top = np.max(np.abs(x)) if x.size else 0.0
        return top if top == 0 or not np.isfinite(top) else top * np.sqrt(np.sum((x / top) ** 2))

    np.testing.assert_allclose(together, [reference(t) for t in tensors], rtol=1e-6)


def test_watch_keeps_one_copy_between_logged_steps_until_removed(tmp_path, monkeypatch):
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    made = []
    original = torch_math.copies

    def copies(tensors):
        made.extend(original(tensors))
        return made[len(made) - len(tensors):]

    monkeypatch.setattr(torch_math, "copies", copies)
    handle = wur_torch.watch(optimizer, model, str(tmp_path / "run"), every=2)
    for _ in range(6):  # logged steps 0, 2, 4
        model(torch.ones(1, 4)).sum().backward()
        optimizer.step()
    assert len(made) == 4  # the first logged step's copies, reused at steps 2 and 4
    kept = [weakref.ref(t) for t in made]
    made.clear()
    handle.remove()
    gc.collect()
    assert all(ref() is None for ref in kept), "remove() keeps the copies"


@pytest.mark.parametrize("threads", [1, 2])
def test_sums_of_squares_of_chunked_tensors(threads, monkeypatch):
    """Σx² of tensors of one chunk and of many (a partial last chunk or none), float32 and
    float64, contiguous or not, mixed in one call, against numpy's float64 sums; the
    chunking bounds float32's error (a whole-tensor float32 norm is ~100× further off)."""
    monkeypatch.setattr(torch_math, "CHUNK_ELEMENTS", 4096)
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    generator = torch.Generator().manual_seed(7)
    tensors = [torch.randn(n, generator=generator) * scale for n, scale in
               [(300_001, 1.0), (7, 1e-3), (4096, 1e10), (3 * 4096, 1.0), (0, 1.0)]]
    tensors.append(torch.randn(50_000, generator=generator, dtype=torch.float64) * 1e-100)
    tensors.append(torch.randn(200, 90, generator=generator).t())  # not contiguous
    tensors[0][::7] *= 100
    try:
        got = torch_math.sums_of_squares(tensors)
    finally:
        torch.set_num_threads(previous)
    expected = [float(np.sum(t.double().numpy() ** 2)) for t in tensors]
    assert got.dtype == torch.float64 and got.shape == (len(tensors),)
    np.testing.assert_allclose(got.numpy(), expected, rtol=2e-6)


@pytest.mark.parametrize("threads", [1, 2])
def test_sums_of_squares_of_equal_magnitudes_at_the_default_chunk(threads):
    """An update of ±lr everywhere (Lion's, Adam's first): every float32 addition rounds the
    same way, the worst case for a chunk's sum; at the module's own chunk size Σx² stays
    within 2e-5 of numpy's float64 sum (chunks of 2**16 were 9e-5 off)."""
    generator = torch.Generator().manual_seed(11)
    signs = [torch.randint(0, 2, (n,), generator=generator).float() * 2 - 1
             for n in (1_000_003, 3 * torch_math.CHUNK_ELEMENTS)]
    tensors = [s * 1e-3 for s in signs]
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        got = torch_math.sums_of_squares(tensors)
    finally:
        torch.set_num_threads(previous)
    expected = [float(np.sum(t.double().numpy() ** 2)) for t in tensors]
    np.testing.assert_allclose(got.numpy(), expected, rtol=2e-5)


@pytest.mark.parametrize("threads", [1, 2, 3, 4])
def test_subtract_with_sums_is_the_three_passes_bit_for_bit(threads):
    """`subtract_with_sums` at the module's own chunk and block sizes: the same subtracted
    tensors and, bit for bit, the same sums as `sums_of_squares` before and after
    `foreach.sub_`, for tensors taken a block at a time (whole blocks; a last block of one
    row or more; a partial last chunk; float64), others not (small, not contiguous, just at
    the block size) and a snapshot's stack, on one to four threads (last blocks of one to
    three rows: fewer rows than threads)."""
    chunk, block = torch_math.CHUNK_ELEMENTS, torch_math.UPDATE_BLOCK_ELEMENTS
    generator = torch.Generator().manual_seed(5)
    shapes = [(1024, 1024), (784, 1024), (5 * chunk + 5,), (9 * chunk,), (6 * chunk,),
              (7 * chunk + 3,), (block + 1,), (block,), (1000,), (300_000,)]
    weights = [torch.randn(*shape, generator=generator) for shape in shapes]
    weights[-1] = weights[-1].double() * 1e3
    weights.append(torch.randn(600, 400, generator=generator).t())  # not contiguous
    weights.extend(torch.randn(64, 64, generator=generator) for _ in range(8))  # one stack
    news = [w + torch.randn(w.shape, generator=generator, dtype=w.dtype) * 1e-3 * w
            for w in weights]
    olds = torch_math.snapshot(weights, [])
    assert olds.stacks and any(t.numel() > block and t.is_contiguous() for t in olds)
    expected = torch_math.snapshot(weights, [])
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        weight_sums, update_sums = torch_math.subtract_with_sums(olds, news)
        expected_weight_sums = torch_math.sums_of_squares(expected)
        foreach.sub_(expected, news)
        expected_update_sums = torch_math.sums_of_squares(expected)
    finally:
        torch.set_num_threads(previous)
    assert torch.equal(weight_sums, expected_weight_sums)
    assert torch.equal(update_sums, expected_update_sums)
    for got, want in zip(olds, expected):
        assert torch.equal(got, want)
    reference = [float(np.sum((w.double() - n.double()).numpy() ** 2))
                 for w, n in zip(weights, news)]
    np.testing.assert_allclose(update_sums.numpy(), reference, rtol=1e-5)


@pytest.mark.parametrize("chunk", [None, 3000])
def test_counts_of_many_pairs_are_each_pairs_counts(chunk, monkeypatch):
    """`elementwise_counts_of` buckets small pairs together (in batches) and large
    ones alone: each pair's counts are `elementwise_counts`' own, for float32 and float64
    pairs mixed, adversarial values (0/0, NaN, ±inf, edges), empty and non-contiguous
    tensors, and a pair whose 0/0 is the only NaN of its batch."""
    if chunk is not None:  # batches of at most 3000, the large pairs in chunks of 1000
        monkeypatch.setattr(torch_math, "HISTOGRAM_CPU_BATCH_ELEMENTS", chunk)
        monkeypatch.setattr(torch_math, "HISTOGRAM_CPU_CHUNK_ELEMENTS", chunk // 3)
    pairs = []
    for dtype in (torch.float32, torch.float64):
        w, new = _weights_and_updates(dtype)
        for start, stop in [(0, 1000), (1000, 1001), (1001, 1001), (2000, 4500), (5000, 9000)]:
            pairs.append((w[start:stop], new[start:stop]))
        finite = torch.isfinite(w) & torch.isfinite(new) & (w != 0)
        pairs.append((w[finite][:500], new[finite][:500]))
        pairs.append((w[:600].view(20, 30).t(), new[:600].view(20, 30).t()))  # not contiguous
    zero = torch.tensor([0.0, 1.0, 2.0])
    pairs.append((zero, torch.tensor([0.0, 1.5, 2.0])))  # one 0/0, no other NaN
    got = torch_math.elementwise_counts_of([b for b, _ in pairs], [a for _, a in pairs])
    assert len(got) == len(pairs)
    for (before, after), counts in zip(pairs, got):
        expected = torch_math.elementwise_counts(before, after)
        assert counts.dtype == torch.int64 and torch.equal(counts, expected)
    assert got[-1][metadata.ZERO_BUCKET] == 2 and got[-1][metadata.NAN_BUCKET] == 0
    assert torch_math.elementwise_counts_of([], []) == []
