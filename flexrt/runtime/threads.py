"""The executor's ``threads`` dispatcher: one worker thread per device (and per link in use).

Each worker runs its device's ready tasks, earliest in the predicted order first (the predicted
order itself whenever its next task is ready). Readiness is kept under one scheduling lock, one
heap and one condition per worker: finishing a task hands the successors that became ready to
their devices' heaps and wakes only those workers. A worker never waits while one of its tasks is
ready: waiting for the predicted next task could deadlock, e.g. a device holding a ring member
that another device waits for behind a task that needs the ring's sum.

Entry point: ``run_threads`` (``Executor._run_threads``).
"""

from __future__ import annotations

import heapq
import threading
import time
from collections import defaultdict


def run_threads(ex, st, phase=None):
    """Run the tasks of ``phase`` (all when None) of executor ``ex``'s plan on state ``st``; returns
    None, or (task, exception) of the first task that failed (the others stop)."""
    return _ThreadedRun(ex, st, phase).run()


def _per_device(ex) -> dict:
    """Device -> its task indices in predicted order (kept on the executor: its plan is fixed)."""
    if not hasattr(ex, "_per_device"):
        ex._per_device = defaultdict(list)
        for t in ex.plan.tasks:
            ex._per_device[t.device].append(t.index)
    return ex._per_device


class _ThreadedRun:
    def __init__(self, ex, st, phase) -> None:
        self.ex, self.st, self.plan = ex, st, ex.plan
        self.mine = (lambda i: True) if phase is None else phase.__getitem__
        counts = {d: sum(1 for i in ts if self.mine(i)) for d, ts in _per_device(ex).items()}
        self.per_device = {d: n for d, n in counts.items() if n}
        self.sched = threading.Lock()
        self.cond = {d: threading.Condition(self.sched) for d in self.per_device}
        self.owner = [t.device for t in self.plan.tasks]
        self.ready: dict[int, list[int]] = {d: [] for d in self.per_device}
        for i, r in enumerate(st.remaining):
            if r == 0 and not st.done[i] and self.mine(i):
                self.ready[self.owner[i]].append(i)
        for h in self.ready.values():
            heapq.heapify(h)
        self.errors: list = []
        self.clock = time.perf_counter

    def run(self):
        threads = [threading.Thread(target=self._worker, args=(d,), daemon=True, name=f"flexrt-dev{d}")
                   for d in sorted(self.per_device)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        return self.errors[0] if self.errors else None

    def _finish(self, members, start_i) -> None:
        st, plan = self.st, self.plan
        end = self.clock() - st.t0
        woken = set()
        for m in members:
            st.end[m] = end
            st.start[m] = start_i
            self.ex._release(plan.tasks[m], st)
            st.done[m] = True
        with self.sched:
            for m in members:
                for s in plan.succ[m]:
                    st.remaining[s] -= 1
                    if st.remaining[s] == 0 and self.mine(s):
                        heapq.heappush(self.ready[self.owner[s]], s)
                        woken.add(self.owner[s])
            for d in woken:
                self.cond[d].notify()

    def _worker(self, dev: int) -> None:
        c, heap, st = self.cond[dev], self.ready[dev], self.st
        for _ in range(self.per_device[dev]):
            with self.sched:
                while not heap and not self.errors:
                    c.wait(0.5)
                if self.errors:
                    return
                i = heapq.heappop(heap)
            task = self.plan.tasks[i]
            t = self.clock() - st.t0
            try:
                complete = self.ex._execute(task, st)
            except Exception as e:  # noqa: BLE001  (reported by the caller, naming the task)
                with self.sched:
                    self.errors.append((task, e))
                    for other in self.cond.values():
                        other.notify_all()
                return
            if complete:
                self._finish(self.ex._members(task), t)
            else:
                st.start[i] = t
