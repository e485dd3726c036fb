"""``fit``'s loop, as FlexFlow's Keras runs it: per epoch the callbacks' hooks, FFModel's data
loaders, and per batch FFModel's ``forward``, ``zero_gradients``, ``backward``, ``update``.

Entry point: ``train``.
"""

from __future__ import annotations

import sys

import numpy as np

from flexrt.keras import callbacks as kcallbacks

SHUFFLE_SEED = 0x5EED  # the permutation of epoch e comes from (SHUFFLE_SEED, runtime seed, e)


def _fmt(logs: dict) -> str:
    return ", ".join(f"{k} {v:.2f}%" if k in ("accuracy", "val_accuracy") else f"{k} {v:.4g}" for k, v in logs.items())


def epoch_order(model, epoch: int, n: int):
    """The sample order of ``epoch`` (a seeded permutation)."""
    seed = model.ffmodel.runtime_options["seed"]
    return np.random.default_rng((SHUFFLE_SEED, seed, epoch)).permutation(n)


def train(model, arrays, labels, n: int, epochs: int, cbs: list, shuffle: bool, verbose,
          validation=None) -> kcallbacks.History:
    """``epochs`` epochs of whole batches; with ``validation`` (data loaders), each epoch's logs also
    hold ``val_loss`` and ``val_<metric>`` over those samples with the epoch's final weights, as Keras'."""
    ffmodel = model.ffmodel
    batch = model.ffconfig.batch_size
    iterations = n // batch
    for cb in cbs:
        cb.set_params({"epochs": epochs, "steps": iterations, "verbose": verbose})
        cb.on_train_begin()
    loaders = None if shuffle else model._loaders(arrays, labels)
    start = model.ffconfig.get_current_time()
    done = 0
    for epoch in range(epochs):
        model.stop_training = False
        for cb in cbs:
            cb.on_epoch_begin(epoch)
        if shuffle:
            loaders = model._loaders(arrays, labels, epoch_order(model, epoch, n))
        for dl in loaders:
            dl.reset()
        ffmodel.reset_metrics()
        first = len(ffmodel.history)
        for it in range(iterations):
            for cb in cbs:
                cb.on_batch_begin(it)
            for dl in loaders:
                dl.next_batch(ffmodel)
            ffmodel.forward()
            ffmodel.zero_gradients()
            ffmodel.backward()
            ffmodel.update()
            for cb in cbs:
                cb.on_batch_end(it, {"loss": ffmodel.history[-1]["loss"]})
        logs = {"loss": float(np.mean([h["loss"] for h in ffmodel.history[first:]])),
                **ffmodel.get_perf_metrics().result()}
        if validation is not None:
            trained = ffmodel.get_perf_metrics()
            perf = ffmodel.evaluate_quietly(x=validation[:-1], y=validation[-1], training=False)
            logs.update({"val_loss": perf.loss, **{f"val_{k}": v for k, v in perf.result().items()}})
            ffmodel._perf = trained     # callbacks read the epoch's training metrics from the model
        done += 1
        if verbose:
            print(f"epoch {epoch + 1}/{epochs}: {iterations} iterations, {_fmt(logs)}", file=sys.stdout)
        stops = [kcallbacks.call_epoch_end(cb, epoch, logs) for cb in cbs]
        if any(stops) or model.stop_training:
            print(f"Accuracy reaches, now early stop, epoch: {epoch}")
            break
    wall_s = max((model.ffconfig.get_current_time() - start) * 1e-6, 1e-9)
    trained = iterations * batch   # whole batches: a last partial one is left out (fit warns)
    print(f"epochs {done}, ELAPSED TIME = {wall_s:.4f}s, iterations {iterations}, samples {trained}, "
          f"THROUGHPUT = {trained * done / wall_s:.2f} samples/s")
    for cb in cbs:
        cb.on_train_end()
    return model.history
