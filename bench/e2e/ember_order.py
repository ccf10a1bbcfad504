"""ember_order: the order in which ps-worker --shuffle-buffer N trains a file's rows, in Python.

A replica of worker/data/ps_shuffle.c (the pool, its fill rule and its splitmix64 draws) and of
the seed ps_reader_batch.c gives it (--seed folded with the rank), for one rank reading the
whole file in batches of B. torch_dlrm.py --shuffle-buffer N trains in this order, so PyTorch
and ps-worker can be compared on the same order (issue 19: with the same draws the two
trainers take the same steps, tests/worker/test_torch_steps.py checks this order against
ps-worker's checkpoints). Design decision: a plain list simulation, O(n) per epoch; fast enough
for the 100k-row bench sets."""

MASK = (1 << 64) - 1
GAMMA = 0x9E3779B97F4A7C15


def mix64(x):
    """ps_mix64 (common/ps_hash.h): the splitmix64 finalizer of x + golden."""
    x = (x + GAMMA) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def shuffle_order(n, batch, seed, capacity, rank=0, epoch=0):
    """Row indices 0..n-1 in the order ps-worker --seed seed --shuffle-buffer capacity --batch
    batch trains them in epoch `epoch` (capacity 0: file order)."""
    if not capacity:
        return list(range(n))
    st = mix64(mix64(seed ^ mix64(0x72616E6B00 + rank)) ^ mix64(0x5348554646 + epoch))
    src = [range(b, min(b + batch, n)) for b in range(0, n, batch)]
    queue, nread, slots, count, out, in_done = [], 0, [0] * (capacity + 2 * batch), 0, [], False
    while True:
        # fill: read source batches until the front batch can be drawn
        while True:
            if not queue:
                if nread == len(src):
                    return out
            elif in_done or count >= capacity + queue[0]:
                break
            b = src[nread]
            nread += 1
            in_done = nread == len(src)
            queue.append(len(b))
            for r in b:
                slots[count] = r
                count += 1
        # draw the front batch: a uniform slot, swapped to the end of the live region
        for _ in range(queue.pop(0)):
            st = (st + GAMMA) & MASK
            j = (mix64(st) * count) >> 64
            slots[j], slots[count - 1] = slots[count - 1], slots[j]
            count -= 1
            out.append(slots[count])
