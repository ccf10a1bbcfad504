#!/usr/bin/python3
"""test_torch_bag: ember.torch.EmbeddingBag against torch.nn.EmbeddingBag on the same rows.

A table of SGD with lr 1 on a real ps-server; a torch.nn.EmbeddingBag whose weight holds the
rows pulled for keys 0..V-1. For modes sum, mean and max, with (ids, offsets) bags that repeat
keys (and an empty bag), and with 2-d fixed-size bags: the forward outputs are equal, and after
loss.backward() the rows pulled again equal weight - weight.grad (lr 1: the server applied
exactly the gradient that torch computes for nn.EmbeddingBag), rows of keys outside the batch
unchanged. prefetch(ids) gives the same forward; a pull through torch.no_grad pushes nothing."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib_harness import Results, Servers, use_build_package  # noqa: E402

try:
    import torch
except ImportError:
    print("SKIP: torch not installed")
    sys.exit(77)
use_build_package()
import ember  # noqa: E402
import ember.torch  # noqa: E402

V, DIM = 30, 6


def main():
    r = Results()
    torch.manual_seed(0)
    with Servers(2) as s:
        c = ember.Client(s.urls, timeout_ms=20000)
        every = np.arange(V, dtype=np.uint64)
        cases = [("sum", True, False), ("mean", True, False), ("max", True, False),
                 ("sum", False, False), ("sum", True, True)]
        for i, (mode, with_offsets, prefetch) in enumerate(cases):
            name = f"bag_{mode}_{'off' if with_offsets else '2d'}{'_pf' if prefetch else ''}"
            t = c.table(name, dim=DIM, optimizer="sgd", lr=1.0, init=0.5, seed=i)
            ref = torch.nn.EmbeddingBag(V, DIM, mode=mode)
            with torch.no_grad():
                ref.weight.copy_(torch.from_numpy(t.pull(every)))
            before = ref.weight.detach().clone()
            bag = ember.torch.EmbeddingBag(t, mode=mode)
            if with_offsets:
                ids = torch.tensor([3, 7, 3, 3, 11, 7, 0, 29, 29, 5], dtype=torch.int64)
                offsets = torch.tensor([0, 3, 3, 6, 8], dtype=torch.int64)  # bag 1 is empty
                if mode == "max":  # torch's max mode has no empty bags
                    offsets = torch.tensor([0, 3, 4, 6, 8], dtype=torch.int64)
            else:
                ids = torch.tensor([[3, 7, 3], [11, 7, 0], [29, 29, 5]], dtype=torch.int64)
                offsets = None
            R = torch.randn(len(offsets) if offsets is not None else ids.shape[0], DIM)
            if prefetch:
                bag.prefetch(ids)
            out = bag(ids, offsets)
            want = ref(ids, offsets)
            r.check(f"{name}: forward equals torch.nn.EmbeddingBag",
                    torch.allclose(out, want, rtol=1e-6, atol=1e-7),
                    f"max diff {float((out - want).abs().max()):.2e}")
            (out * R).sum().backward()
            (want * R).sum().backward()
            after = torch.from_numpy(t.pull(every))
            expect = before - ref.weight.grad
            r.check(f"{name}: rows after backward = weight - nn.EmbeddingBag's gradient",
                    torch.allclose(after, expect, rtol=1e-6, atol=1e-6),
                    f"max diff {float((after - expect).abs().max()):.2e}")
            untouched = np.setdiff1d(np.arange(V), ids.reshape(-1).numpy())
            r.check(f"{name}: rows outside the batch unchanged",
                    torch.equal(after[untouched], before[untouched]))
        t = c.table("bag_nograd", dim=DIM, optimizer="sgd", lr=1.0, init=0.5)
        bag = ember.torch.EmbeddingBag(t)
        b0 = t.pull(every)
        with torch.no_grad():
            out = bag(torch.tensor([1, 2]), torch.tensor([0]))
        r.check("under no_grad: no push, and the output needs no grad",
                np.array_equal(t.pull(every), b0) and not out.requires_grad)
        big = np.array([ember.hash_feature(0, v) for v in range(4)], np.uint64)
        out = bag(torch.from_numpy(big.view(np.int64)), torch.tensor([0, 2]))
        r.check("hashed keys (over 2^63) as int64 ids", out.shape == (2, DIM) and
                torch.allclose(out[0], torch.from_numpy(t.pull(big[:2]).sum(0))))
        c.close()
    r.finish()


if __name__ == "__main__":
    main()
