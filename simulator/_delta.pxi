# Included by _engine.pyx: delta simulation, Algorithm 2 (flexrt.simulator.engine documents it and
# holds the pure-Python reference). Bellman-Ford from the edited tasks, switching to a replay of
# Algorithm 1 after the cut K0 when it runs long.


cdef int _queue(Engine eng, i64 t) noexcept nogil:
    if eng.queued[t] and eng.qkey[t] == eng.rdy_[t]:
        return OK
    eng.queued[t] = 1
    eng.qkey[t] = eng.rdy_[t]
    return push(eng, eng.rdy_[t], t)


cdef double _max_pred_end(Engine eng, i64 t) noexcept nogil:
    cdef double r = 0.0
    cdef i64 e = eng.in_head[t]
    while e >= 0:
        if eng.end_[eng.e_src[e]] > r:
            r = eng.end_[eng.e_src[e]]
        e = eng.e_inext[e]
    return r


cdef i64 _walk_from(Engine eng, i64 t, i64 u) noexcept nogil:
    """The task after which t belongs, walking from u (a task in t's device list)."""
    cdef i64 q
    if before(eng, u, t):
        q = u
        while eng.dnext[q] >= 0 and before(eng, eng.dnext[q], t):
            q = eng.dnext[q]
        return q
    q = eng.dprev[u]
    while q >= 0 and before(eng, t, q):
        q = eng.dprev[q]
    return q


cdef i64 _find_slot(Engine eng, i64 t) noexcept nogil:
    """Where an unlinked task goes: walk from its latest predecessor (or earliest successor)
    on the same device, else from whichever end of the list is nearer in time."""
    cdef i64 d = eng.dev_[t], u = -1, e, x
    e = eng.in_head[t]
    while e >= 0:
        x = eng.e_src[e]
        if eng.linked[x] and eng.dev_[x] == d and (u < 0 or before(eng, u, x)):
            u = x
        e = eng.e_inext[e]
    if u < 0:
        e = eng.out_head[t]
        while e >= 0:
            x = eng.e_dst[e]
            if eng.linked[x] and eng.dev_[x] == d and (u < 0 or before(eng, x, u)):
                u = x
            e = eng.e_onext[e]
    if u < 0:
        if eng.head[d] < 0:
            return -1
        u = eng.head[d]
        if eng.rdy_[t] - eng.rdy_[u] > eng.rdy_[eng.tail[d]] - eng.rdy_[t]:
            u = eng.tail[d]
    return _walk_from(eng, t, u)


cdef int _link(Engine eng, i64 t) noexcept nogil:
    cdef i64 n = insert_after(eng, t, _find_slot(eng, t))
    if n >= 0 and _queue(eng, n):
        return NOMEM
    return _queue(eng, t)


cdef int _reposition(Engine eng, i64 t) noexcept nogil:
    cdef i64 p = eng.dprev[t], n = eng.dnext[t], q
    if p >= 0 and before(eng, t, p):
        q = eng.dprev[p]
        while q >= 0 and before(eng, t, q):
            q = eng.dprev[q]
    elif n >= 0 and before(eng, n, t):
        q = n
        while eng.dnext[q] >= 0 and before(eng, eng.dnext[q], t):
            q = eng.dnext[q]
    else:
        return OK
    n = unlink(eng, t)
    if n >= 0 and _queue(eng, n):
        return NOMEM
    n = insert_after(eng, t, q)
    if n >= 0 and _queue(eng, n):
        return NOMEM
    return OK


cdef int _set_ready(Engine eng, i64 t, double r) noexcept nogil:
    if r == eng.rdy_[t]:
        return OK
    eng.rdy_[t] = r
    if _reposition(eng, t):
        return NOMEM
    return _queue(eng, t)


cdef int _guess_fresh(Engine eng) noexcept nogil:
    """First timings of new tasks, in a topological order of the new tasks (ready from
    predecessors, no device contention); CYCLE when the new tasks close a cycle."""
    cdef i64 i, t, e, c, nfresh = 0, top = 0, done = 0
    cdef double r
    for i in range(eng.ndirty):
        t = eng.dirty[i]
        if eng.alive[t] and eng.flags[t] & FRESH:
            nfresh += 1
            eng.aux[t] = 0
            e = eng.in_head[t]
            while e >= 0:
                if eng.flags[eng.e_src[e]] & FRESH:
                    eng.aux[t] += 1
                e = eng.e_inext[e]
    if nfresh == 0:
        return OK
    cdef i64* stack = <i64*>malloc(nfresh * sizeof(i64))
    if stack == NULL:
        return NOMEM
    for i in range(eng.ndirty):
        t = eng.dirty[i]
        if eng.alive[t] and eng.flags[t] & FRESH and eng.aux[t] == 0:
            stack[top] = t
            top += 1
    while top > 0:
        top -= 1
        t = stack[top]
        done += 1
        r = _max_pred_end(eng, t)
        eng.rdy_[t] = r
        eng.start_[t] = r
        eng.end_[t] = r + eng.exe_[t]
        e = eng.out_head[t]
        while e >= 0:
            c = eng.e_dst[e]
            if eng.flags[c] & FRESH:
                eng.aux[c] -= 1
                if eng.aux[c] == 0:
                    stack[top] = c
                    top += 1
            e = eng.e_onext[e]
    free(stack)
    return OK if done == nfresh else CYCLE


cdef inline bint _at_or_after(Engine eng, i64 t, double cut_ready, i64 cut_prio, i64 cut_id) noexcept nogil:
    """key(t) >= K0 = (cut_ready, cut_prio, cut_id)."""
    if eng.rdy_[t] != cut_ready:
        return eng.rdy_[t] > cut_ready
    return eng.prio[t] > cut_prio or (eng.prio[t] == cut_prio and t >= cut_id)


cdef inline bint _key_below(double r, i64 p, i64 t, double cut_ready, i64 cut_prio, i64 cut_id) noexcept nogil:
    """(r, p, t) < K0."""
    if r != cut_ready:
        return r < cut_ready
    return p < cut_prio or (p == cut_prio and t < cut_id)


cdef int _collect_suffix(Engine eng, double cut_ready, i64 cut_prio, i64 cut_id) noexcept nogil:
    """buf[:nsuffix] = the tasks with key >= K0, bound[d] = the last task before them on d.
    Bellman-Ford changes neither (the module docstring of engine.py says why), so the delta
    collects them once, to size its budget, and replays them later if it must."""
    cdef i64 d, t, k = 0
    for d in range(eng.num_devices):
        t = eng.tail[d]
        while t >= 0 and _at_or_after(eng, t, cut_ready, cut_prio, cut_id):
            if k == eng.bcap and eng._reserve_buf(k + 1):
                return NOMEM
            eng.buf[k] = t
            k += 1
            t = eng.dprev[t]
        eng.bound[d] = t
    eng.nsuffix = k
    return OK


cdef int _replay_suffix(Engine eng) noexcept nogil:
    """Cut every device list at K0 and run Algorithm 1 over the suffix (collected)."""
    cdef i64 d, t, i, count = eng.nsuffix
    for d in range(eng.num_devices):
        t = eng.bound[d]
        eng.tail[d] = t
        if t >= 0:
            eng.dnext[t] = -1
        else:
            eng.head[d] = -1
    for i in range(count):
        eng.inset[eng.buf[i]] = 1
    cdef int rv = _replay(eng, count, False)
    for i in range(count):
        eng.inset[eng.buf[i]] = 0
    eng.replays += 1
    if rv == NOMEM:
        return NOMEM
    return OK if rv == OK else FALLBACK  # the full simulation raises the error


cdef enum:
    NOT_DIRECT = 100


cdef int _direct_replay(Engine eng, double cut_ready, i64 cut_prio, i64 cut_id) noexcept nogil:
    """Replay the suffix after K0 at once when it holds at least ``delta_direct_ratio`` of the
    live tasks (a change on the critical path early in the iteration): the tasks in device lists
    at or after K0, plus the edited tasks not in a list (new, or moved to another device), whose
    keys are at or after K0 too. NOT_DIRECT when the suffix is smaller; FULL when it holds at least
    ``delta_full_ratio`` of them (Algorithm 1 over everything costs less per task than a replay)."""
    cdef i64 i, t, k, unlinked = 0
    if not eng.delta_direct_ratio <= 1.0:
        return NOT_DIRECT
    for i in range(eng.ndirty):
        t = eng.dirty[i]
        if eng.alive[t] and not eng.linked[t]:
            unlinked += 1
    if _collect_suffix(eng, cut_ready, cut_prio, cut_id):
        return NOMEM
    if eng.nsuffix + unlinked < eng.delta_direct_ratio * eng.live:
        return NOT_DIRECT
    if eng.nsuffix + unlinked >= eng.delta_full_ratio * eng.live:
        return FULL
    k = eng.nsuffix
    if eng._reserve_buf(k + unlinked):
        return NOMEM
    for i in range(eng.ndirty):
        t = eng.dirty[i]
        if eng.alive[t] and not eng.linked[t]:
            eng.buf[k] = t
            k += 1
    eng.nsuffix = k
    eng.direct_replays += 1
    return _replay_suffix(eng)


cdef int _delta(Engine eng) noexcept nogil:
    cdef i64 i, t, p, c, e, processed = 0, cut_id = -1, cut_prio = 0
    # pops allowed before replaying the suffix: a probe, then a share of the suffix; never
    # more than a few full simulations' worth (an edit that closed a cycle never settles)
    cdef i64 hard = 4 * (eng.live + eng.nedges) + 1024
    cdef i64 budget = eng.delta_probe_pops if eng.delta_probe_pops < hard else hard
    cdef bint counted = False
    cdef uint8_t f
    cdef double s, en, old, rc, r, cut_ready = INFINITY
    cdef Item item
    eng.hsize = 0
    eng.last_processed = 0
    cdef int rv = _guess_fresh(eng)
    if rv == CYCLE:
        return FALLBACK
    if rv:
        return rv
    # K0: the smallest key, old or new, of a task the edits touch (see engine.py)
    for i in range(eng.ndirty):
        t = eng.dirty[i]
        f = eng.flags[t]
        if not eng.alive[t]:
            continue
        if not f & FRESH and _key_below(eng.rdy_[t], eng.prio[t], t, cut_ready, cut_prio, cut_id):
            cut_ready, cut_prio, cut_id = eng.rdy_[t], eng.prio[t], t
        if f & (FRESH | LINK | READY):
            r = eng.rdy_[t] if f & FRESH else _max_pred_end(eng, t)
            if _key_below(r, eng.prio[t], t, cut_ready, cut_prio, cut_id):
                cut_ready, cut_prio, cut_id = r, eng.prio[t], t
    # a suffix after K0 of at least delta_direct_ratio of the tasks: replay it at once, without
    # placing the new tasks in their device lists first (the replay places them)
    rv = _direct_replay(eng, cut_ready, cut_prio, cut_id)
    if rv != NOT_DIRECT:
        return rv
    for i in range(eng.ndirty):
        t = eng.dirty[i]
        f = eng.flags[t]
        if not eng.alive[t]:
            continue
        if f & LINK:
            if not f & FRESH:
                eng.rdy_[t] = _max_pred_end(eng, t)
            if _link(eng, t):
                return NOMEM
        elif f & READY:
            if _set_ready(eng, t, _max_pred_end(eng, t)):
                return NOMEM
        if f & START and _queue(eng, t):
            return NOMEM
    while eng.hsize > 0:
        item = pop(eng)
        t = item.id
        if not eng.alive[t] or not eng.queued[t] or eng.qkey[t] != item.key:
            continue  # removed, already processed, or superseded by a later push
        processed += 1
        if processed > budget:
            if not counted:
                counted = True
                if _collect_suffix(eng, cut_ready, cut_prio, cut_id):
                    return NOMEM
                budget = <i64>(eng.delta_replay_ratio * eng.nsuffix)
                if budget < eng.delta_probe_pops:
                    budget = eng.delta_probe_pops
                if budget > hard:
                    budget = hard
            if processed > budget:
                eng.last_processed = processed - 1
                return _replay_suffix(eng)
        eng.queued[t] = 0
        p = eng.dprev[t]
        s = item.key
        if p >= 0 and eng.end_[p] > s:
            s = eng.end_[p]
        en = s + eng.exe_[t]
        if not en > s:  # maybe transient; the replay decides
            eng.last_processed = processed - 1
            if not counted and _collect_suffix(eng, cut_ready, cut_prio, cut_id):
                return NOMEM
            return _replay_suffix(eng)
        eng.start_[t] = s
        old = eng.end_[t]
        eng.end_[t] = en
        if en != old:
            e = eng.out_head[t]
            while e >= 0:
                c = eng.e_dst[e]
                rc = eng.rdy_[c]
                if en > rc:
                    if _set_ready(eng, c, en):
                        return NOMEM
                elif en < old and old == rc:  # c may have lost its latest predecessor
                    if _set_ready(eng, c, _max_pred_end(eng, c)):
                        return NOMEM
                e = eng.e_onext[e]
            if eng.dnext[t] >= 0 and _queue(eng, eng.dnext[t]):
                return NOMEM
    eng.last_processed = processed
    return OK
