# Included by _engine.pyx: Algorithm 1 over a set of tasks (a full simulation, or the replay after
# a delta's cut) and the renumbering of live tasks (``Engine.compact``).


cdef int _replay(Engine eng, i64 count, bint everything) noexcept nogil:
    """Algorithm 1 over the tasks in buf[:count] (inset marks them unless ``everything``),
    after every task outside the set: those keep their timing, and device lists end where
    the set begins. OK, CYCLE (aux > 0 marks the stuck tasks) or VANISH (err_task)."""
    cdef i64 i, t, d, last, e, c, p, k, done = 0
    cdef double r, s, en
    cdef Item item
    if eng.hcap < count:
        if grow(<void**>&eng.heap, count * sizeof(Item)):
            return NOMEM
        eng.hcap = count
    eng.hsize = 0
    for i in range(count):
        t = eng.buf[i]
        eng.dprev[t] = -1
        eng.dnext[t] = -1
        eng.linked[t] = 0
        eng.queued[t] = 0
        if everything:
            r = 0.0
            k = eng.indeg[t]
        else:
            r = 0.0
            k = 0
            e = eng.in_head[t]
            while e >= 0:
                p = eng.e_src[e]
                if eng.inset[p]:
                    k += 1
                elif eng.end_[p] > r:
                    r = eng.end_[p]
                e = eng.e_inext[e]
        eng.rdy_[t] = r
        eng.aux[t] = k
        if k == 0:
            push(eng, r, t)  # capacity reserved above: cannot fail
    while eng.hsize > 0:
        item = pop(eng)
        t = item.id
        d = eng.dev_[t]
        last = eng.tail[d]
        s = item.key
        if last >= 0 and eng.end_[last] > s:
            s = eng.end_[last]
        en = s + eng.exe_[t]
        if not en > s:
            eng.err_task = t
            eng.err_start = s
            return VANISH
        eng.start_[t] = s
        eng.end_[t] = en
        insert_after(eng, t, last)
        done += 1
        e = eng.out_head[t]
        while e >= 0:
            c = eng.e_dst[e]
            if en > eng.rdy_[c]:
                eng.rdy_[c] = en
            eng.aux[c] -= 1
            if eng.aux[c] == 0:
                push(eng, eng.rdy_[c], c)
            e = eng.e_onext[e]
    eng.last_processed += done
    return OK if done == count else CYCLE


cdef void _compact(Engine eng) noexcept nogil:
    """Renumber the live tasks 0..live-1 in id order (``Engine.compact``)."""
    cdef i64 t, k = 0, e, d, i, m = 0
    for t in range(eng.n):  # aux: old id -> new id
        if eng.alive[t]:
            eng.aux[t] = k
            k += 1
        else:
            eng.aux[t] = -1
    for t in range(eng.n):
        if not eng.alive[t]:
            continue
        # edges first: they name tasks by old id, reached through the old slot
        e = eng.out_head[t]
        while e >= 0:
            eng.e_src[e] = eng.aux[t]
            eng.e_dst[e] = eng.aux[eng.e_dst[e]]
            e = eng.e_onext[e]
    for t in range(eng.n):
        if not eng.alive[t]:
            continue
        k = eng.aux[t]
        eng.dev_[k] = eng.dev_[t]
        eng.exe_[k] = eng.exe_[t]
        eng.prio[k] = eng.prio[t]
        eng.rdy_[k] = eng.rdy_[t]
        eng.start_[k] = eng.start_[t]
        eng.end_[k] = eng.end_[t]
        eng.qkey[k] = eng.qkey[t]
        eng.dprev[k] = eng.aux[eng.dprev[t]] if eng.dprev[t] >= 0 else -1
        eng.dnext[k] = eng.aux[eng.dnext[t]] if eng.dnext[t] >= 0 else -1
        eng.out_head[k] = eng.out_head[t]
        eng.in_head[k] = eng.in_head[t]
        eng.indeg[k] = eng.indeg[t]
        eng.alive[k] = 1
        eng.linked[k] = eng.linked[t]
        eng.queued[k] = 0
        eng.flags[k] = eng.flags[t]
        eng.inset[k] = 0
    for d in range(eng.num_devices):
        if eng.head[d] >= 0:
            eng.head[d] = eng.aux[eng.head[d]]
            eng.tail[d] = eng.aux[eng.tail[d]]
    for i in range(eng.ndirty):
        if eng.aux[eng.dirty[i]] >= 0:
            eng.dirty[m] = eng.aux[eng.dirty[i]]
            m += 1
    eng.ndirty = m
    eng.n = eng.live
    for t in range(eng.n):
        eng.aux[t] = 0
