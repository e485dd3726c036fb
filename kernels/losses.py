"""Training losses with FlexFlow's semantics, for any array module ``xp`` (numpy or cupy).

FlexFlow applies the cross-entropy losses to the model's *softmax output probabilities*, not to
logits: ``loss_forward`` takes ``probs`` for the two cross-entropies, and ``loss_backward`` returns
the gradient with respect to that output, ``-label / p / batch``. When the last operator is a
softmax, FlexFlow skips that quotient and hands the softmax input the fused gradient
``(p - onehot) / batch`` directly (``softmax_cross_entropy_backward``); pushing ``loss_backward``'s
gradient through the softmax backward gives the same array. The batch is every axis but the last
(classes); sparse labels are integer class ids of shape ``[batch...]`` or ``[batch..., 1]``
(FlexFlow's ``[N, 1]`` int32 label tensor).

The mean squared errors compare the output with labels of the same shape: ``avg`` reduces by the
mean over every element, ``sum`` by the sum (``torch.nn.functional.mse_loss`` with
``reduction="mean"`` / ``"sum"``). The identity loss (FlexFlow's ``LOSS_IDENTITY``) takes the
model's output as the loss: its sum over the batch (the first axis), gradient ``1 / batch``; labels
are not read. ``LOSS_BINARY_CROSSENTROPY`` (flexrt's, for Keras' ``binary_crossentropy``) scores
sigmoid probabilities against 0/1 labels of the output's shape, ``-mean(t log p + (1 - t) log(1 - p))``
with p clipped to [1e-7, 1 - 1e-7] as Keras clips it.

Example:
    >>> import numpy as np
    >>> p = np.array([[0.25, 0.75]])
    >>> float(loss_forward(np, LossType.LOSS_SPARSE_CATEGORICAL_CROSSENTROPY, p, np.array([1])))  # -log 0.75
    0.2876820724517809

Entry points: ``LossType``, ``loss_forward``, ``loss_backward``, ``softmax_cross_entropy_backward``,
``LOSSES``, ``CROSS_ENTROPIES``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from flexrt.errors import ConfigError, ShapeError
from flexrt.ir.ops import SoftmaxAttrs
from flexrt.kernels.kinds import NamedKind


class LossType(NamedKind):
    """FlexFlow's loss enum, with its names and values. ``short_name`` is the name ``--loss`` and
    ``Session(loss=...)`` take: the member's name without ``LOSS_`` and ``_REDUCE``, in lower case
    (``"sparse_categorical_crossentropy"``, ``"mean_squared_error_avg"``)."""

    LOSS_CATEGORICAL_CROSSENTROPY = 50
    LOSS_SPARSE_CATEGORICAL_CROSSENTROPY = 51
    LOSS_MEAN_SQUARED_ERROR_AVG_REDUCE = 52
    LOSS_MEAN_SQUARED_ERROR_SUM_REDUCE = 53
    LOSS_IDENTITY = 54   # the model's output is the loss (summed, over the batch); labels unused
    # flexrt's extension (FlexFlow has none): Keras' binary_crossentropy of sigmoid probabilities
    LOSS_BINARY_CROSSENTROPY = 60

    @classmethod
    def noun(cls) -> str:
        return "loss"

    @property
    def short_name(self) -> str:
        return self.name[len("LOSS_"):].removesuffix("_REDUCE").lower()


# The losses that score softmax probabilities (FlexFlow's convention).
CROSS_ENTROPIES = frozenset({LossType.LOSS_CATEGORICAL_CROSSENTROPY, LossType.LOSS_SPARSE_CATEGORICAL_CROSSENTROPY})


def _check_float(where: str, out) -> None:
    if out.dtype.kind != "f":
        raise ShapeError(f"{where}: the model output must be floating point, got dtype {out.dtype} "
                         f"(shape {list(out.shape)})")


def _dense_labels(xp, where: str, out, labels):
    """Labels of the output's shape and dtype (one-hot or regression targets)."""
    _check_float(where, out)
    if tuple(labels.shape) != tuple(out.shape):
        raise ShapeError(f"{where}: labels must have the output's shape {list(out.shape)}, "
                         f"got {list(labels.shape)}")
    if labels.dtype.kind not in "fiub":
        raise ShapeError(f"{where}: labels must be numeric, got dtype {labels.dtype}")
    return labels.astype(out.dtype, copy=False)


def _sparse_labels(xp, where: str, out, labels):
    """Integer class ids flattened to ``[batch]``, checked against ``out``'s ``[batch..., classes]``."""
    _check_float(where, out)
    batch_shape = tuple(out.shape[:-1])
    shape = tuple(labels.shape)
    if shape not in (batch_shape, batch_shape + (1,)):
        raise ShapeError(f"{where}: sparse labels must have shape {list(batch_shape)} or "
                         f"{list(batch_shape + (1,))} for output shape {list(out.shape)}, got {list(shape)}")
    if labels.dtype.kind not in "iu":
        raise ShapeError(f"{where}: sparse labels must be integer class ids, got dtype {labels.dtype} "
                         f"(shape {list(shape)})")
    ids = labels.reshape(-1)
    classes = out.shape[-1]
    if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= classes):
        raise ShapeError(f"{where}: class ids must be in [0, {classes}), got range "
                         f"[{int(ids.min())}, {int(ids.max())}]")
    return ids


def _batch(out) -> int:
    n = 1
    for d in out.shape[:-1]:
        n *= d
    return max(n, 1)


def _onehot(xp, ids, classes: int, dtype):
    eye = xp.zeros((ids.shape[0], classes), dtype=dtype)
    eye[xp.arange(ids.shape[0]), ids] = 1
    return eye


def safe_log(xp, probs):
    """log p with p at least the dtype's smallest normal number: a probability that underflowed to 0
    costs a large finite loss (about 87 in float32), not inf."""
    return xp.log(xp.maximum(probs, probs.dtype.type(xp.finfo(probs.dtype).tiny)))


def _cce_forward(xp, probs, labels):
    t = _dense_labels(xp, "categorical_crossentropy", probs, labels)
    return -xp.sum(t * safe_log(xp, probs)) / probs.dtype.type(_batch(probs))


def _cce_backward(xp, probs, labels):
    t = _dense_labels(xp, "categorical_crossentropy", probs, labels)
    return -t / probs / probs.dtype.type(_batch(probs))


def _scce_forward(xp, probs, labels):
    ids = _sparse_labels(xp, "sparse_categorical_crossentropy", probs, labels)
    p2 = probs.reshape(-1, probs.shape[-1])
    picked = p2[xp.arange(p2.shape[0]), ids]
    return -xp.sum(safe_log(xp, picked)) / probs.dtype.type(_batch(probs))


def _scce_backward(xp, probs, labels):
    ids = _sparse_labels(xp, "sparse_categorical_crossentropy", probs, labels)
    p2 = probs.reshape(-1, probs.shape[-1])
    t = _onehot(xp, ids, p2.shape[1], probs.dtype)
    return (-t / p2 / probs.dtype.type(_batch(probs))).reshape(probs.shape)


def _mse_avg_forward(xp, out, labels):
    d = out - _dense_labels(xp, "mean_squared_error_avg", out, labels)
    return xp.sum(d * d) / out.dtype.type(max(out.size, 1))


def _mse_avg_backward(xp, out, labels):
    d = out - _dense_labels(xp, "mean_squared_error_avg", out, labels)
    return d * out.dtype.type(2.0 / max(out.size, 1))


def _mse_sum_forward(xp, out, labels):
    d = out - _dense_labels(xp, "mean_squared_error_sum", out, labels)
    return xp.sum(d * d)


def _mse_sum_backward(xp, out, labels):
    d = out - _dense_labels(xp, "mean_squared_error_sum", out, labels)
    return d * out.dtype.type(2.0)


BCE_EPSILON = 1e-7   # Keras' backend.epsilon(): probabilities are clipped to [eps, 1 - eps]


def _bce_terms(xp, probs, labels):
    t = _dense_labels(xp, "binary_crossentropy", probs, labels)
    eps = probs.dtype.type(max(BCE_EPSILON, float(xp.finfo(probs.dtype).eps)))
    return t, xp.clip(probs, eps, probs.dtype.type(1) - eps)


def _bce_forward(xp, probs, labels):
    t, p = _bce_terms(xp, probs, labels)
    one = probs.dtype.type(1)
    return -xp.sum(t * xp.log(p) + (one - t) * xp.log(one - p)) / probs.dtype.type(max(probs.size, 1))


def _bce_backward(xp, probs, labels):
    """``(p - t) / (p (1 - p)) / size`` with p clipped: through a sigmoid's backward (``p (1 - p)``)
    that is ``(p - t) / size``, the gradient of Keras' (logit-based) sigmoid cross-entropy, for every
    probability that is not saturated at 0 or 1 in its type."""
    t, p = _bce_terms(xp, probs, labels)
    one = probs.dtype.type(1)
    return (p - t) / (p * (one - p)) / probs.dtype.type(max(probs.size, 1))


def _identity_forward(xp, out, labels):
    return xp.sum(out) / out.dtype.type(max(out.shape[0], 1) if out.ndim else 1)


def _identity_backward(xp, out, labels):
    rows = max(out.shape[0], 1) if out.ndim else 1
    return xp.full(out.shape, 1.0 / rows, dtype=out.dtype)   # FlexFlow: 1 x its scale factor 1 / batch


@dataclass(frozen=True, slots=True)
class Loss:
    """One loss: its forward (a 0-d array) and the gradient w.r.t. the model output."""

    kind: LossType
    forward: Callable
    backward: Callable
    sparse_labels: bool


# One row per FlexFlow LossType, keyed by the member.
LOSSES: dict[LossType, Loss] = {l.kind: l for l in (
    Loss(LossType.LOSS_CATEGORICAL_CROSSENTROPY, _cce_forward, _cce_backward, False),
    Loss(LossType.LOSS_SPARSE_CATEGORICAL_CROSSENTROPY, _scce_forward, _scce_backward, True),
    Loss(LossType.LOSS_MEAN_SQUARED_ERROR_AVG_REDUCE, _mse_avg_forward, _mse_avg_backward, False),
    Loss(LossType.LOSS_MEAN_SQUARED_ERROR_SUM_REDUCE, _mse_sum_forward, _mse_sum_backward, False),
    Loss(LossType.LOSS_IDENTITY, _identity_forward, _identity_backward, False),
    Loss(LossType.LOSS_BINARY_CROSSENTROPY, _bce_forward, _bce_backward, False),
)}


def get_loss(loss: LossType) -> Loss:
    """The row of ``loss`` (a member; ``LossType.parse`` converts a name)."""
    return LOSSES[loss]


def loss_forward(xp, loss: LossType, outputs, labels):
    """The loss of a batch as a 0-d array of the output's dtype.

    ``outputs`` are softmax probabilities for the cross-entropies, any values for the MSEs.
    """
    return get_loss(loss).forward(xp, outputs, labels)


def loss_backward(xp, loss: LossType, outputs, labels):
    """Gradient of ``loss_forward`` with respect to ``outputs`` (same shape and dtype)."""
    return get_loss(loss).backward(xp, outputs, labels)


def fuses_with_softmax(loss: LossType, attrs, rank: int) -> bool:
    """Whether the gradient of ``loss`` over the output of an operator with ``attrs`` (its output of
    ``rank`` dimensions) is taken w.r.t. the softmax's input directly (``softmax_cross_entropy_backward``):
    a cross-entropy over a softmax along the last axis. The executors and the reference trainer
    then skip the softmax's backward: ``-onehot / p`` overflows where a float32 probability
    underflows to 0, and its softmax backward turns that into NaN."""
    return loss in CROSS_ENTROPIES and isinstance(attrs, SoftmaxAttrs) and attrs.axis % rank == rank - 1


def softmax_cross_entropy_backward(xp, loss: LossType, probs, labels):
    """Fused gradient w.r.t. the softmax *input* when the last op is a softmax: ``(p - onehot) / batch``.

    Equal to the softmax backward of ``loss_backward(xp, loss, probs, labels)`` (both when the
    labels are one-hot), without dividing by ``p``; FlexFlow computes this one.
    """
    if loss is LossType.LOSS_CATEGORICAL_CROSSENTROPY:
        t = _dense_labels(xp, loss.short_name, probs, labels)
        return (probs - t) / probs.dtype.type(_batch(probs))
    if loss is LossType.LOSS_SPARSE_CATEGORICAL_CROSSENTROPY:
        ids = _sparse_labels(xp, loss.short_name, probs, labels)
        p2 = probs.reshape(-1, probs.shape[-1])
        g = p2 - _onehot(xp, ids, p2.shape[1], probs.dtype)
        return (g / probs.dtype.type(_batch(probs))).reshape(probs.shape)
    raise ConfigError(f"softmax_cross_entropy_backward: loss {loss.short_name!r} is not a cross-entropy; valid: "
                      f"{', '.join(l.short_name for l in LossType if l in CROSS_ENTROPIES)}")
