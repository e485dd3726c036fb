# Included by _engine.pyx: the heap and the device lists, both in key order (ready, priority, id),
# shared by edits, the full simulation (Algorithm 1) and the delta (_delta.pxi).


cdef inline int grow(void** p, size_t nbytes) noexcept nogil:
    cdef void* q = realloc(p[0], nbytes if nbytes > 0 else 1)
    if q == NULL:
        return NOMEM
    p[0] = q
    return OK


cdef inline bint less(Item a, Item b) noexcept nogil:
    if a.key != b.key:
        return a.key < b.key
    return a.prio < b.prio or (a.prio == b.prio and a.id < b.id)


cdef inline int push(Engine eng, double key, i64 t) noexcept nogil:
    cdef i64 pos, parent, c
    cdef Item item
    if eng.hsize == eng.hcap:
        c = eng.hcap * 2 if eng.hcap > 0 else 256
        if grow(<void**>&eng.heap, c * sizeof(Item)):
            return NOMEM
        eng.hcap = c
    item.key = key
    item.prio = eng.prio[t]
    item.id = t
    pos = eng.hsize
    eng.hsize += 1
    while pos > 0:
        parent = (pos - 1) >> 1
        if not less(item, eng.heap[parent]):
            break
        eng.heap[pos] = eng.heap[parent]
        pos = parent
    eng.heap[pos] = item
    return OK


cdef inline Item pop(Engine eng) noexcept nogil:
    cdef Item top = eng.heap[0]
    cdef Item item
    cdef i64 pos = 0, child, size
    eng.hsize -= 1
    size = eng.hsize
    if size > 0:
        item = eng.heap[size]
        while True:
            child = 2 * pos + 1
            if child >= size:
                break
            if child + 1 < size and less(eng.heap[child + 1], eng.heap[child]):
                child += 1
            if not less(eng.heap[child], item):
                break
            eng.heap[pos] = eng.heap[child]
            pos = child
        eng.heap[pos] = item
    return top


cdef inline bint before(Engine eng, i64 a, i64 b) noexcept nogil:
    """key(a) < key(b): (ready, priority, id) in lexicographic order."""
    if eng.rdy_[a] != eng.rdy_[b]:
        return eng.rdy_[a] < eng.rdy_[b]
    return eng.prio[a] < eng.prio[b] or (eng.prio[a] == eng.prio[b] and a < b)


cdef inline i64 unlink(Engine eng, i64 t) noexcept nogil:
    cdef i64 p = eng.dprev[t], n = eng.dnext[t], d = eng.dev_[t]
    if p >= 0:
        eng.dnext[p] = n
    else:
        eng.head[d] = n
    if n >= 0:
        eng.dprev[n] = p
    else:
        eng.tail[d] = p
    eng.dprev[t] = -1
    eng.dnext[t] = -1
    eng.linked[t] = 0
    return n


cdef inline i64 insert_after(Engine eng, i64 t, i64 q) noexcept nogil:
    cdef i64 d = eng.dev_[t]
    cdef i64 n = eng.dnext[q] if q >= 0 else eng.head[d]
    eng.dprev[t] = q
    eng.dnext[t] = n
    if q >= 0:
        eng.dnext[q] = t
    else:
        eng.head[d] = t
    if n >= 0:
        eng.dprev[n] = t
    else:
        eng.tail[d] = t
    eng.linked[t] = 1
    return n
