"""Verify substitution rules with Z3 (Unity §4): a rule holds when, given the axioms of
``axioms.py``, ``source != destination`` is unsatisfiable for each of its mapped outputs.

Each check runs in a child process (``spawn``) with a hard time limit (the parent kills a child that
overruns; Z3's own timeout is only advisory) and a memory limit (``RLIMIT_AS`` set in the child).
Strategies are tried in turn until one decides: ``concrete`` (both sides evaluated on random inputs
by the NumPy kernels, ``library.check_rule``: a rule whose values differ on two draws is refuted
with no Z3; a false rule such as ``a + b -> b * a`` otherwise leaves every Z3 strategy unknown:
finding a countermodel of quantified axioms is where Z3 gives up), E-matching on the axioms'
patterns, then model-based quantifier instantiation (which can also find a countermodel), then
E-matching with another seed and no auto-configuration. No shipped rule differs concretely (the
library's 2,814: 2,145 hold, 669 do not type on the test layouts; FlexFlow's 528 usable: 255 and
273). A rule is ``PROVED``, ``REFUTED`` (Z3 found a model of the axioms in which the
sides differ: the axioms do not imply the rule; or, before Z3, a concrete counterexample: the
values differ, or they do with its source splits cut unequally, ``library.cut_counterexample``:
strategy ``concrete``) or ``UNKNOWN``
(every strategy gave up or ran out of time); only ``PROVED`` counts as verified, and an ``UNKNOWN``
is logged with what was tried.

Entry points: ``verify_rules``, ``verify_rule``, ``check_rule`` (in-process, no isolation),
``check_axioms`` (consistency), ``rule_terms``.

Example:
    >>> from flexrt.search.substitutions.rule import PatternOp, Rule, Slot, OutputMap
    >>> r = Rule("add_comm", (PatternOp("OP_EW_ADD", (Slot(-1), Slot(-2))),),
    ...          (PatternOp("OP_EW_ADD", (Slot(-2), Slot(-1))),), (OutputMap(0, 0, 0, 0),))
    >>> verify_rule(r, timeout_s=10).status
    <Status.PROVED: 'proved'>
"""

from __future__ import annotations

import enum
import logging
import multiprocessing as mp
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import wait

from flexrt.errors import FlexrtError, GraphError
from flexrt.inputs import clip
from flexrt.search.substitutions.rule import Rule
from flexrt.search.substitutions.translate import rule_terms  # noqa: F401  (re-exported)

log = logging.getLogger(__name__)

# "concrete" first: both sides evaluated on random inputs (``library.check_rule``, no Z3); then Z3's
STRATEGIES = ("concrete", "ematch", "mbqi", "ematch-seed")
CONCRETE_SEEDS = (0, 1)   # a rule is refuted concretely when its sides differ on both draws
_GRACE_S = 3.0   # a child gets this long past Z3's timeout (and its own start) before it is killed


class Status(enum.Enum):
    PROVED = "proved"
    REFUTED = "refuted"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class VerifyResult:
    """What the verifier concluded about one rule. ``tried`` lists ``strategy:outcome`` in order
    (outcomes: unsat, sat, unknown(reason), killed(timeout), crashed, error(...))."""
    name: str
    status: Status
    strategy: str | None
    tried: tuple
    seconds: float
    detail: str = ""

    @property
    def verified(self) -> bool:
        return self.status is Status.PROVED

    def __str__(self) -> str:
        by = f" by {self.strategy}" if self.strategy else ""
        return f"{clip(self.name, 80)}: {self.status.value}{by} in {self.seconds:.2f} s [{', '.join(self.tried)}]"


# ---- one check, in this process -----------------------------------------------------------------

class _Prover:
    """The axioms built once (per process) and reused for every check."""

    def __init__(self):
        from flexrt.search.substitutions.axioms import Z3Algebra, z3_axioms
        self.alg = Z3Algebra()
        self.axioms = z3_axioms(self.alg)

    def solver(self, strategy: str, timeout_s: float):
        z3 = self.alg.z3
        s = z3.Solver()
        if strategy == "ematch":
            s.set("smt.mbqi", False)
        elif strategy == "mbqi":
            s.set("smt.mbqi", True)
        elif strategy == "ematch-seed":
            s.set("smt.auto_config", False)
            s.set("smt.mbqi", False)
            s.set("smt.random_seed", 7)
        else:
            raise GraphError(f"unknown verifier strategy {strategy!r} (valid: {', '.join(STRATEGIES)})")
        s.set("timeout", max(1, int(timeout_s * 1000)))
        s.add(*self.axioms)
        return s

    def check(self, goal_pairs, strategy: str, timeout_s: float, hypotheses=()) -> str:
        """``unsat`` (proved), ``sat`` (countermodel) or ``unknown(reason)``."""
        z3 = self.alg.z3
        s = self.solver(strategy, timeout_s)
        s.add(*hypotheses)
        if goal_pairs:  # no pairs: check the axioms alone (unsat = they are inconsistent)
            s.add(z3.Or(*[a != b for a, b in goal_pairs]))
        r = s.check()
        if r == z3.unsat:
            return "unsat"
        if r == z3.sat:
            return "sat"
        return f"unknown({s.reason_unknown()})"


_PROVER: _Prover | None = None


def _prover() -> _Prover:
    global _PROVER
    if _PROVER is None:
        _PROVER = _Prover()
    return _PROVER


def _conclude(name: str, tried: list, seconds: float, detail: str = "") -> VerifyResult:
    for t in tried:
        strategy, outcome = t.split(":", 1)
        if outcome == "unsat":
            return VerifyResult(name, Status.PROVED, strategy, tuple(tried), seconds, detail)
        if outcome == "sat":
            return VerifyResult(name, Status.REFUTED, strategy, tuple(tried), seconds, detail)
    return VerifyResult(name, Status.UNKNOWN, None, tuple(tried), seconds, detail)


def check_rule(rule: Rule, timeout_s: float = 5.0, strategies: Sequence[str] = STRATEGIES,
               on_step: Callable[[str], None] | None = None) -> VerifyResult:
    """Verify ``rule`` in this process (no hard limits: use ``verify_rules`` for untrusted input)."""
    t0 = time.perf_counter()
    refuted = _concrete(rule, t0)
    if refuted is not None:
        return refuted
    tried: list[str] = []
    if "concrete" in strategies:
        why = _values_differ(rule)
        tried.append(f"concrete:{'sat' if why else 'none'}")
        if on_step:
            on_step(tried[-1])
        if why:
            return _conclude(rule.name, tried, time.perf_counter() - t0, why)
    p = _prover()
    hypotheses: list = []
    try:
        pairs = rule_terms(rule, p.alg, hypotheses)
    except GraphError as e:
        return VerifyResult(rule.name, Status.UNKNOWN, None, tuple(tried) + ("translate:error",),
                            time.perf_counter() - t0, str(e))
    for strategy in (s for s in strategies if s != "concrete"):
        try:
            outcome = p.check(pairs, strategy, timeout_s, hypotheses)
        except MemoryError:
            outcome = "unknown(out of memory)"
        except p.alg.z3.Z3Exception as e:  # resource limits inside Z3
            outcome = f"error({e})"
        tried.append(f"{strategy}:{outcome}")
        if on_step:
            on_step(tried[-1])
        if outcome in ("unsat", "sat"):
            break
    return _conclude(rule.name, tried, time.perf_counter() - t0)


def _values_differ(rule: Rule) -> str | None:
    """Why the rule is false, where its two sides give different values on every draw of
    ``CONCRETE_SEEDS`` (equal NaNs count as equal; a side or rewrite the evaluator refuses is no
    evidence); else None. Two ways: both sides evaluated on parallel layouts of degree 1 or 2 of
    3-d inputs (``library.check_rule``: FlexFlow's convention), then the rule's source built on the
    shapes its operators' roles ask for (``library.rule_input_shapes``: images and kernels for a
    convolution, integer indices and a table for an embedding, vectors for a bias or a norm's
    weights) and rewritten at its first match (``library.keeps_values``). A sound rule never
    differs: its sides compute the same function."""
    from flexrt.search.substitutions.library import check_rule as evaluate_sides
    seeds = ", ".join(map(str, CONCRETE_SEEDS))
    try:
        if all(evaluate_sides(rule, seed=s, equal_nan=True, strict=True) == "fails" for s in CONCRETE_SEEDS):
            return f"on random inputs (seeds {seeds}) the two sides' values differ"
    except (FlexrtError, ValueError, IndexError, KeyError, TypeError, ArithmeticError):  # Z3 will say
        pass
    if _rewrite_changes_values(rule):
        return (f"the rule's source built on its operators' shapes and rewritten at its first match gives other "
                f"values on random inputs (seeds {seeds})")
    return None


def _rewrite_changes_values(rule: Rule) -> bool:
    """Whether rewriting the rule's source graph (on ``rule_input_shapes``) at its first match changes
    its values on every draw of ``CONCRETE_SEEDS``; False where the source does not build, nothing
    matches or the evaluator refuses a draw."""
    from flexrt.search.substitutions.library import keeps_values, rule_input_shapes
    from flexrt.search.substitutions.match import find_matches
    from flexrt.search.substitutions.fingerprint import to_pcg
    try:
        g, _ = to_pcg(rule.src, rule_input_shapes(rule))
        matches = find_matches(g, rule)
        return bool(matches) and all(not keeps_values(g, rule, matches[0], s) for s in CONCRETE_SEEDS)
    except (FlexrtError, ValueError, IndexError, KeyError, TypeError, ArithmeticError, FloatingPointError):
        return False


def _concrete(rule: Rule, t0: float) -> VerifyResult | None:
    """REFUTED by a concrete counterexample (``library.cut_counterexample``), else None."""
    from flexrt.search.substitutions.library import cut_counterexample
    try:
        why = cut_counterexample(rule)
    except (FlexrtError, ValueError, IndexError, KeyError, TypeError):   # a malformed rule: Z3 will say
        return None
    if why is None:
        return None
    return _conclude(rule.name, ["concrete:sat"], time.perf_counter() - t0, why)


# ---- child processes ----------------------------------------------------------------------------

def _worker(conn, memory_bytes: int) -> None:
    import resource
    if memory_bytes:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    _prover()
    conn.send(("ready",))
    while True:
        msg = conn.recv()
        if msg is None:
            return
        idx, rule_json, timeout_s, strategies = msg
        res = check_rule(Rule.from_json(rule_json), timeout_s, strategies,
                         on_step=lambda step, idx=idx: conn.send(("step", idx, step)))
        conn.send(("done", idx, res.status.value, res.strategy, res.tried, res.seconds, res.detail))


class _Child:
    def __init__(self, ctx, memory_bytes: int):
        self.conn, child_conn = ctx.Pipe()
        self.proc = ctx.Process(target=_worker, args=(child_conn, memory_bytes), daemon=True)
        self.proc.start()
        child_conn.close()
        self.task: int | None = None
        self.tried: list[str] = []
        self.started = 0.0
        self.deadline = 0.0

    def kill(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(5)
        self.conn.close()


def verify_rules(rules: Sequence[Rule], timeout_s: float = 5.0, jobs: int = 2,
                 strategies: Sequence[str] = STRATEGIES, memory_mb: int = 2048,
                 progress: Callable[[int, VerifyResult], None] | None = None) -> list[VerifyResult]:
    """Verify every rule, ``jobs`` child processes at a time; one result per rule, in order.

    ``timeout_s`` bounds each strategy (Z3's timeout, enforced by killing the child ``_GRACE_S``
    later); ``memory_mb`` is each child's address-space limit. A killed or crashed child is replaced
    and the rule's remaining strategies run in the new one.

    Example:
        >>> [r.status.value for r in verify_rules(rules, timeout_s=5, jobs=2)]  # doctest: +SKIP
        ['proved', 'proved', 'unknown']
    """
    rules = list(rules)
    results: list[VerifyResult | None] = [None] * len(rules)
    if not rules:
        return []
    # A task: (rule index, strategies still to try, outcomes so far, seconds so far).
    pending: list[tuple] = []
    for i, rule in enumerate(rules):
        refuted = _concrete(rule, time.perf_counter())
        if refuted is None:
            pending.append((i, tuple(strategies), [], 0.0))
        else:
            results[i] = refuted
            if progress:
                progress(i, refuted)
    pending.reverse()
    if not pending:
        return results
    return _Pool(rules, results, pending, timeout_s, jobs, memory_mb, progress).run()


class _Pool:
    """The child processes of ``verify_rules``: each proves one rule at a time, strategy after
    strategy; one that runs past its deadline or dies is replaced and the rule's remaining
    strategies go back to the queue."""

    start_deadline_s = 120.0   # spawning, importing flexrt and z3, building the axioms

    def __init__(self, rules, results, pending, timeout_s, jobs, memory_mb, progress) -> None:
        self.rules, self.results, self.pending = rules, results, pending
        self.timeout_s, self.progress = timeout_s, progress
        self.ctx = mp.get_context("spawn")
        self.memory_bytes = int(memory_mb) * 2 ** 20
        self.children = [self._spawn() for _ in range(max(1, min(jobs, len(pending))))]

    def _spawn(self) -> _Child:
        c = _Child(self.ctx, self.memory_bytes)
        c.deadline = time.monotonic() + self.start_deadline_s
        return c

    def _finish(self, idx: int, tried: list, seconds: float, detail: str = "") -> None:
        res = _conclude(self.rules[idx].name, tried, seconds, detail)
        self.results[idx] = res
        if res.status is Status.UNKNOWN:
            log.warning("not verified: %s", res)
        if self.progress:
            self.progress(idx, res)

    def _assign(self, c: _Child) -> None:
        c.task, c.deadline = None, float("inf")   # idle: no deadline until it gets a task
        if self.pending:
            c.task = self.pending.pop()
            idx, todo, _, _ = c.task
            c.tried, c.started = [], time.monotonic()
            c.deadline = c.started + self.timeout_s + _GRACE_S
            c.conn.send((idx, self.rules[idx].to_json(), self.timeout_s, todo))

    def _lost(self, c: _Child, why: str) -> None:
        """The child was killed or died mid-task: record the strategy it was on, requeue the rest."""
        idx, todo, before, secs = c.task
        step = todo[len(c.tried)] if len(c.tried) < len(todo) else "?"
        tried = before + c.tried + [f"{step}:{why}"]
        secs += time.monotonic() - c.started
        rest = todo[len(c.tried) + 1:]
        if rest:
            self.pending.append((idx, rest, tried, secs))
        else:
            self._finish(idx, tried, secs, f"child process {why}")
        c.task = None

    def _replace(self, i: int) -> None:
        self.children[i].kill()
        self.children[i] = self._spawn()

    def _receive(self, i: int, c: _Child) -> None:
        try:
            msg = c.conn.recv()
        except (EOFError, OSError):
            msg = ("crashed",)
        if msg[0] == "ready":
            self._assign(c)
        elif msg[0] == "step":
            c.tried.append(msg[2])
            c.deadline = time.monotonic() + self.timeout_s + _GRACE_S
        elif msg[0] == "done":
            idx, _, before, secs = c.task
            tried, seconds, detail = msg[4:]
            self._finish(idx, before + list(tried), secs + seconds, detail)
            self._assign(c)
        else:  # the child died (out of memory, a Z3 abort)
            if c.task is None:
                raise GraphError(f"verifier child process exited before it was ready (exit code "
                                 f"{c.proc.exitcode}); a script calling verify_rules needs an "
                                 f"`if __name__ == '__main__':` guard (spawned children import it)")
            self._lost(c, "crashed")
            self._replace(i)

    def run(self) -> list:
        children = self.children
        try:
            while self.pending or any(c.task is not None for c in children):
                next_deadline = min(c.deadline for c in children)
                ready = wait([c.conn for c in children], timeout=None if next_deadline == float("inf")
                             else max(0.0, next_deadline - time.monotonic()))
                for i, c in enumerate(children):
                    if c.conn in ready:
                        self._receive(i, c)
                    elif time.monotonic() >= c.deadline:
                        if c.task is None:
                            raise GraphError(f"verifier child process did not start within "
                                             f"{self.start_deadline_s:.0f} s")
                        self._lost(c, "killed(timeout)")
                        self._replace(i)
        finally:
            for c in children:
                try:
                    c.conn.send(None)
                except (OSError, BrokenPipeError):
                    pass
                c.proc.join(2)
                c.kill()
        return self.results


def verify_rule(rule: Rule, timeout_s: float = 5.0, **kw) -> VerifyResult:
    """``verify_rules([rule])[0]``: one rule, in a child process."""
    return verify_rules([rule], timeout_s=timeout_s, jobs=1, **kw)[0]


def _prove_false_rule() -> Rule:
    """A false rule whose source mentions every operator (so that E-matching has ground terms to
    work on): it can only be proved from inconsistent axioms."""
    from flexrt.search.substitutions.rule import OutputMap
    from flexrt.search.substitutions.rule import PatternOp as P
    from flexrt.search.substitutions.rule import Slot as S
    x, y, w = S(-1), S(-2), S(-3)
    par = lambda d, k: (("PM_PARALLEL_DIM", d), ("PM_PARALLEL_DEGREE", k))
    src = (P("OP_CONCAT", (x, y), (("PM_AXIS", 1), ("PM_NUM_INPUTS", 2))),              # 0
           P("OP_SPLIT", (S(0),), (("PM_AXIS", 1), ("PM_NUM_OUTPUTS", 2))),             # 1
           P("OP_PARTITION", (S(1, 0),), par(1, 2)),                                    # 2
           P("OP_REPLICATE", (w,), (("PM_PARALLEL_DEGREE", 2),)),                       # 3
           P("OP_LINEAR", (S(2), S(3)), (("PM_ACTI", 2),)),                             # 4
           P("OP_RELU", (S(4),)),                                                       # 5
           P("OP_COMBINE", (S(5),), par(1, 2)),                                         # 6
           P("OP_PARTITION", (S(6),), par(0, 2)),                                       # 7
           P("OP_PARTITION", (w,), par(1, 2)),                                          # 8
           P("OP_LINEAR", (S(7), S(8)), (("PM_ACTI", 0),)),                             # 9
           P("OP_REDUCE", (S(9),), (("PM_PARALLEL_DEGREE", 2),)),                       # 10
           P("OP_EW_ADD", (S(10), S(1, 1))),                                            # 11
           P("OP_EW_MUL", (S(11), S(11))),                                              # 12
           P("OP_TRANSPOSE", (S(12),)),                                                 # 13
           P("OP_SCALAR_MULTIPLY", (S(13),), (("PM_SCALAR", 3),)))                      # 14
    dst = (P("OP_SCALAR_MULTIPLY", (y,), (("PM_SCALAR", 1),)),)
    return Rule("axioms-prove-false", src, dst, (OutputMap(len(src) - 1, 0, 0, 0),))


def check_axioms(timeout_s: float = 10.0, strategies: Sequence[str] = ("ematch",), **kw) -> list[VerifyResult]:
    """Try to prove false rules: the one above, ``relu(x) = x`` and ``x = y``. Any ``PROVED`` means
    the axioms are inconsistent (they prove anything). An inconsistency found while writing the
    axioms (concat associativity with the equal-halves split axioms) made Z3 prove ``relu(x) = x``
    by E-matching in about 7 s, hence the generous default limit."""
    from flexrt.search.substitutions.rule import OutputMap
    from flexrt.search.substitutions.rule import PatternOp as P
    from flexrt.search.substitutions.rule import Slot as S
    one = (("PM_SCALAR", 1),)
    relu_x = Rule("relu-is-identity", (P("OP_RELU", (S(-1),)),), (P("OP_SCALAR_MULTIPLY", (S(-1),), one),),
                  (OutputMap(0, 0, 0, 0),))
    x_y = Rule("x-equals-y", (P("OP_SCALAR_MULTIPLY", (S(-1),), one),), (P("OP_SCALAR_MULTIPLY", (S(-2),), one),),
               (OutputMap(0, 0, 0, 0),))
    # typed and satisfiable, false for indices into the second table (it was proved while the axioms
    # with the typing hypotheses were inconsistent)
    rows = Rule("embedding-reads-the-first-table", (P("OP_CONCAT", (S(-1), S(-2)), (("PM_AXIS", 1),)),
                                                    P("OP_EMBEDDING", (S(-3), S(0)))),
                (P("OP_EMBEDDING", (S(-3), S(-1))),), (OutputMap(1, 0, 0, 0),))
    return verify_rules([_prove_false_rule(), relu_x, x_y, rows], timeout_s=timeout_s, strategies=strategies, **kw)
