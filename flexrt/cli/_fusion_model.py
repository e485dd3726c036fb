"""``flexrt fusion-model collect | train | evaluate``: the learned fused-operator cost model (DisCo §4.2,
§5.2, §6.5).

- ``collect [--models resnet50,transformer,...] [--count N] [--seed S] [--batch B] [--devices D]
  [--max-size K] --output FILE``: DisCo's training samples: per model, ``N`` random forward fusion
  groups of data parallelism over ``D`` local devices (global batch ``B``), each measured on this
  host as one fused kernel and member by member (``ProfiledCostModel``; its cache under
  ``FLEXRT_CACHE_DIR`` makes a second run quick), written as JSON lines;
- ``train --samples FILE [--epochs E] [--seed S] [--no-shrink] --output MODEL.npz``: fit the model on
  a split of the samples, weigh its residual by leave-one-model-out cross-validation over the
  samples' models (``LearnedFusedModel.fit_shrink``), print the training time and the error on the
  held-out rest;
- ``evaluate --samples FILE --model MODEL.npz [--cdf FILE.png]``: per predictor (the learned model and
  the baselines), the share of samples predicted within 10 % and 14 % of the measured time and the
  median error (DisCo's Fig. 9: over 90 % within 14 %); ``--cdf`` draws the error CDFs.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from flexrt.cli._common import add_json_flag, count, emit_json
from flexrt.errors import ConfigError
from flexrt.inputs import writable_file

NAME = "fusion-model"
HELP = "collect fused-operator samples, train and evaluate the learned fused-operator cost model"
ACCEPTS_MODEL_FLAGS = False
DEFAULT_MODELS = ("resnet50", "vgg19", "transformer", "rnnlm", "bert_large")   # DisCo §5.2, less Reformer (slow here)
MAX_COUNT = 1_000_000
DEFAULT_ENSEMBLE = 5


def add_arguments(parser) -> None:
    sub = parser.add_subparsers(dest="fm_command", metavar="ACTION", required=True)
    col = sub.add_parser("collect", help="generate random fused groups in zoo models and measure them on this host",
                         allow_abbrev=False)
    col.add_argument("--models", default=",".join(DEFAULT_MODELS),
                     help=f"comma-separated zoo models (default {','.join(DEFAULT_MODELS)})")
    col.add_argument("--count", type=count(1, MAX_COUNT), default=200, metavar="N",
                     help="samples per model (default 200; fewer where a model has fewer distinct groups)")
    col.add_argument("--seed", type=count(0), default=0, help="seed of the group generator (default 0)")
    col.add_argument("--batch", type=count(1), default=4, metavar="B",
                     help="global batch size, split over the devices (default 4: small pieces, quick to measure)")
    col.add_argument("--devices", type=count(1, 64), default=4, metavar="D",
                     help="local devices data parallelism splits the batch over (default 4)")
    col.add_argument("--repeats", type=count(1, 1000), default=5, metavar="R",
                     help="timed runs per measurement, the median kept (default 5; more: less noisy labels)")
    col.add_argument("--max-size", type=count(2, 64), default=6, metavar="K",
                     help="operators per group at most (default 6)")
    col.add_argument("--paired", action="store_true",
                     help="time each group's members and its fused task back to back in rounds, not through the "
                          "profile cache (both sides of a sample see the same host state)")
    col.add_argument("--output", required=True, metavar="FILE", help="the samples file to write (JSON lines)")
    col.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    add_json_flag(col)
    tr = sub.add_parser("train", help="fit the learned fused-operator model to collected samples", allow_abbrev=False)
    tr.add_argument("--samples", required=True, metavar="FILE", help="samples from `flexrt fusion-model collect`")
    tr.add_argument("--epochs", type=count(1, 100_000), metavar="E", help="training epochs (default: the model's)")
    tr.add_argument("--seed", type=count(0), default=0, help="seed of the split and the initial weights (default 0)")
    tr.add_argument("--ensemble", type=count(1, 64), default=DEFAULT_ENSEMBLE, metavar="K",
                    help=f"networks trained from K seeds and averaged (default {DEFAULT_ENSEMBLE}; a fine-tuned "
                         f"model keeps its own)")
    tr.add_argument("--no-shrink", action="store_true",
                    help="keep the network's residual whole (default: its weight is chosen by leave-one-model-out "
                         "cross-validation over the samples' models, one more network trained per model)")
    tr.add_argument("--output", required=True, metavar="MODEL", help="the model file to write (.npz)")
    tr.add_argument("--init", metavar="MODEL", help="fine-tune this trained model (DisCo 5.2: operator types or a "
                    "host it has not seen) instead of training a new one")
    add_json_flag(tr)
    ev = sub.add_parser("evaluate", help="prediction errors of the learned model and the baselines",
                        allow_abbrev=False)
    ev.add_argument("--samples", required=True, metavar="FILE", help="samples to evaluate on")
    ev.add_argument("--model", required=True, metavar="MODEL", help="a model file from `flexrt fusion-model train`")
    ev.add_argument("--cdf", metavar="FILE", help="draw the error CDFs (DisCo's Fig. 9) as PNG")
    ev.add_argument("--devices", type=count(1, 64), default=4, metavar="D",
                    help="local devices the samples were collected on, for the analytic baseline (default 4)")
    add_json_flag(ev)


def _fused_model():
    try:
        from flexrt.simulator import fused_model
    except ImportError as e:
        raise ConfigError(f"the learned fused-operator model is not available in this build ({e})") from None
    return fused_model


def _existing(path: str, flag: str, what: str) -> Path:
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"{flag} {path}: no such file; {what}")
    if not p.is_file():
        raise ConfigError(f"{flag} {path} is not a regular file")
    return p


def _model_names(text: str) -> list[str]:
    from flexrt.model.loader import zoo_models
    names = [n.strip() for n in text.split(",") if n.strip()]
    zoo = [z.name for z in zoo_models()]
    if not names:
        raise ConfigError(f"--models is empty; give comma-separated zoo models such as {','.join(DEFAULT_MODELS)}")
    bad = [n for n in names if n not in zoo]
    if bad:
        raise ConfigError(f"--models: unknown zoo model {', '.join(bad)}; valid: {', '.join(zoo)}")
    if len(set(names)) != len(names):
        raise ConfigError(f"--models lists a model twice: {text}")
    return names


def _bar(total: int, disable: bool):
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc="fused samples", unit="sample", file=sys.stderr, leave=False, disable=disable)


def _collect(args) -> int:
    from flexrt.machine import local_machine
    from flexrt.model import load_model
    from flexrt.simulator.cost_model import ProfiledCostModel
    from flexrt.simulator.fused_samples import collect
    from flexrt.strategy import data_parallel
    names = _model_names(args.models)
    output = writable_file(args.output, "--output")
    fm = _fused_model()
    machine = local_machine(args.devices)
    spec = machine.devices[0].spec
    cost = ProfiledCostModel(repeats=args.repeats)
    t0 = time.perf_counter()
    bar = _bar(args.count * len(names), args.no_progress or args.json)
    samples, per_model = [], {}
    try:
        for name in names:
            pcg = load_model(name, ["-b", str(args.batch)]).model.pcg
            strategy = data_parallel(pcg, machine, args.devices)
            got = collect(strategy, machine, cost, spec, args.count, args.seed, name, max_size=args.max_size,
                          progress=bar.update if bar is not None else None, paired=args.paired)
            per_model[name] = len(got)
            samples += got
            if bar is not None:
                bar.update(args.count - len(got))    # a model with fewer distinct groups
    finally:
        if bar is not None:
            bar.close()
        cost.flush()
    try:
        fm.save_samples(output, samples)
    except OSError as e:
        raise ConfigError(f"cannot write the samples to {output}: {e.strerror or e}") from None
    elapsed = time.perf_counter() - t0
    doc = {"output": str(output), "samples": len(samples), "per_model": per_model, "measurements": cost.measurements,
           "elapsed_s": elapsed, "profile_cache": str(cost.cache.path)}
    if args.json:
        emit_json(doc)
        return 0
    for name, n in per_model.items():
        print(f"{name:>16}: {n} samples")
    print(f"wrote {len(samples)} samples to {output} in {elapsed:.1f} s ({cost.measurements} new measurements; "
          f"profile cache {cost.cache.path})")
    return 0


def _load(path: str, flag: str) -> list:
    p = _existing(path, flag, "collect samples with `flexrt fusion-model collect --output FILE`")
    samples = _fused_model().load_samples(p)
    if not samples:
        raise ConfigError(f"{flag} {path} holds no samples")
    return samples


HELD_OUT = 0.2     # share of the samples ``train`` keeps aside to report its error on


def _split(samples: list, seed: int) -> tuple[list, list]:
    """(training, held-out) samples: a seeded shuffle, ``HELD_OUT`` of them (at least one) kept aside
    where there are five or more; else all train and none are held out."""
    import numpy as np
    if len(samples) < 5:
        return list(samples), []
    order = np.random.default_rng(seed).permutation(len(samples))
    k = max(1, round(HELD_OUT * len(samples)))
    return [samples[i] for i in order[k:]], [samples[i] for i in order[:k]]


def _train(args) -> int:
    fm = _fused_model()
    samples = _load(args.samples, "--samples")
    output = writable_file(args.output, "--output")
    if output.exists() and os.path.samefile(output, args.samples):
        raise ConfigError(f"--output {output} is the --samples file; writing the model there would lose the samples")
    train, held = _split(samples, args.seed)
    if args.init:
        model = fm.LearnedFusedModel.load(_existing(args.init, "--init", "train one with `flexrt fusion-model train`"))
    else:
        model = fm.LearnedFusedModel(seed=args.seed, ensemble=args.ensemble)
    t0 = time.perf_counter()
    epochs = {"epochs": args.epochs} if args.epochs else {}
    losses = model.fit(train, fine_tune=bool(args.init), **epochs)
    if not args.no_shrink and not args.init:
        model.fit_shrink(train, **epochs)
    elapsed = time.perf_counter() - t0
    if held:
        model.choose(train, held)
    try:
        model.save(output)
    except OSError as e:
        raise ConfigError(f"cannot write the model to {output}: {e.strerror or e}") from None
    doc = {"output": str(output), "train_samples": len(train), "held_out_samples": len(held),
           "ensemble": len(model.ensemble), "epochs": len(losses), "final_loss": losses[-1], "train_time_s": elapsed,
           "held_out": model.held_out or None, "chosen": model.chosen, "shrink": model.shrink,
           "shrink_scores": {str(k): v for k, v in model.shrink_scores.items()} or None,
           "cross_model": model.cross_model or None}
    if args.json:
        emit_json(doc)
        return 0
    print(f"trained {len(model.ensemble)} network(s) on {len(train)} samples, {len(losses)} epochs in "
          f"{elapsed:.1f} s (final loss {losses[-1]:.4g})")
    if model.shrink_scores:
        scores = ", ".join(f"{w:g}: {v:.1%}" for w, v in model.shrink_scores.items())
        print(f"residual weight {model.shrink:g}, by leave-one-model-out share within 10 % ({scores})")
    if held:
        _print_table(f"held out ({len(held)} samples)", model.held_out)
        if model.cross_model:
            print("on models left out (leave-one-model-out), within 10 %: " +
                  ", ".join(f"{n} {v:.1%}" for n, v in model.cross_model.items()))
        print(f"the simulator will use: {model.chosen} (best share within 10 % on "
              f"{'models left out, then ' if model.cross_model else ''}the held-out samples)")
    else:
        print("held-out: none (fewer than 5 samples); the simulator will use the learned network")
    print(f"wrote the model to {output}")
    return 0


def _print_table(title: str, table: dict) -> None:
    print(f"{title}; prediction error |predicted - measured| / measured")
    print(f"{'predictor':<18} {'<= 10 %':>8} {'<= 14 %':>8} {'median':>8}")
    for name, r in table.items():
        print(f"{name:<18} {r['share_within_10pct']:>8.1%} {r['share_within_14pct']:>8.1%} "
              f"{r['median_rel_error']:>8.1%}")


def _linear_cross_fit(fm, samples: list):
    """The least-squares baseline predicted out of sample: fitted on each half, predicting the other."""
    import numpy as np

    def predict(batch):
        half = len(batch) // 2
        a, b = list(batch[:half]), list(batch[half:])
        if not a:
            return fm.LinearFusedModel().fit(b).predict(b)
        return np.concatenate([fm.LinearFusedModel().fit(b).predict(a), fm.LinearFusedModel().fit(a).predict(b)])
    return predict


def _evaluate(args) -> int:
    from flexrt.machine import local_machine
    if args.cdf and not args.cdf.lower().endswith(".png"):
        raise ConfigError(f"--cdf {args.cdf}: the CDF plot is a PNG image; give a file name ending in .png")
    fm = _fused_model()
    samples = _load(args.samples, "--samples")
    model_path = _existing(args.model, "--model", "train one with `flexrt fusion-model train --output MODEL.npz`")
    cdf = writable_file(args.cdf, "--cdf") if args.cdf else None
    model = fm.LearnedFusedModel.load(model_path)
    spec = local_machine(args.devices).devices[0].spec
    predictors = {"learned": model.predict, "sum of members": fm.sum_baseline,
                  "analytic": fm.analytic_baseline(spec), "linear (2-fold)": _linear_cross_fit(fm, samples)}
    results = {name: fm.evaluate(p, samples) for name, p in predictors.items()}
    if cdf is not None:
        try:
            fm.plot_cdf({name: r["errors"] for name, r in results.items()}, cdf)
        except OSError as e:
            raise ConfigError(f"cannot write the CDF plot to {cdf}: {e.strerror or e}") from None
    table = {name: {k: v for k, v in r.items() if k != "errors"} for name, r in results.items()}
    if args.json:
        emit_json({"samples": len(samples), "model": str(model_path), "predictors": table, "chosen": model.chosen,
                   "cdf": str(cdf) if cdf else None})
        return 0
    _print_table(f"{len(samples)} samples from {args.samples}", table)
    print(f"the model file's choice for the simulator: {model.chosen}")
    if cdf is not None:
        print(f"wrote the error CDFs to {cdf}")
    return 0


def run(args, extra) -> int:
    return {"collect": _collect, "train": _train, "evaluate": _evaluate}[args.fm_command](args)
