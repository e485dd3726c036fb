"""Portable scatter-adds for backward kernels (NumPy and CuPy): ``xp.add.at`` where the array module
has it, else a weighted ``bincount`` over flat positions (NumPy and CuPy both have one)."""

from __future__ import annotations


def scatter_add_along(xp, shape, dim, index, src, dtype, use_add_at=None):
    """Zeros of ``shape`` with ``src`` added at ``index`` along ``dim`` (the inverse of
    take_along_axis; repeated indices accumulate). ``index`` may be smaller than ``shape`` outside
    ``dim`` (only that leading block is written). Uses ``xp.add.at`` when the array module has it,
    else a bincount over flat positions (NumPy and CuPy both have a weighted bincount)."""
    out = xp.zeros(shape, dtype=dtype)
    size = shape[dim]
    index = index.astype(xp.int64) % size
    if use_add_at is None:
        use_add_at = hasattr(xp.add, "at")
    region = out[tuple(slice(None) if d == dim else slice(0, n) for d, n in enumerate(index.shape))]
    if use_add_at:
        grids = []
        for d, n in enumerate(index.shape):
            if d == dim:
                grids.append(index)
            else:
                r = [1] * index.ndim
                r[d] = n
                grids.append(xp.arange(n).reshape(r))
        xp.add.at(region, tuple(grids), src.astype(dtype, copy=False))
        return out
    rshape = region.shape
    strides = [1] * len(rshape)
    for d in range(len(rshape) - 2, -1, -1):
        strides[d] = strides[d + 1] * rshape[d + 1]
    flat = xp.zeros(index.shape, dtype=xp.int64)
    for d, n in enumerate(index.shape):
        if d == dim:
            flat = flat + index * strides[d]
        else:
            r = [1] * index.ndim
            r[d] = n
            flat = flat + xp.arange(n).reshape(r) * strides[d]
    total = 1
    for n in rshape:
        total *= n
    summed = xp.bincount(flat.reshape(-1), weights=src.reshape(-1).astype(xp.float64), minlength=total)
    region[...] = summed.reshape(rshape).astype(dtype, copy=False)
    return out


def scatter_add_rows(xp, num_rows: int, idx, values):
    """``out[idx[i]] += values[i]`` for a flat integer ``idx`` [M] and ``values`` [M, ...]; returns
    ``out`` [num_rows, ...] (an embedding table's gradient)."""
    idx = idx.reshape(-1)
    values = values.reshape((idx.shape[0],) + tuple(values.shape[1:]))
    index = xp.broadcast_to(idx.reshape((-1,) + (1,) * (values.ndim - 1)), values.shape)
    return scatter_add_along(xp, (num_rows,) + tuple(values.shape[1:]), 0, index, values, values.dtype)
