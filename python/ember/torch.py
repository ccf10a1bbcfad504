"""ember.torch: PyTorch modules whose embedding rows live in Ember.

EmbeddingBag(table, mode="sum") is used like torch.nn.EmbeddingBag: forward(ids, offsets) (or
2-d ids of fixed-size bags) returns one pooled row per bag. The ids are Ember keys (int64
tensors reinterpreted as uint64, or uint64 numpy arrays: ember.hash_feature's keys fit).

Design decisions (why):
- The rows of a batch are pulled once per unique key (numpy's sort-based unique, no Python
  loop), into a tensor that enters autograd through _PullRows, a torch.autograd.Function;
  pooling is torch's own embedding_bag over the unique rows, so every mode and its gradient
  are torch's. _PullRows.backward receives the gradient of each unique row (torch already
  summed the duplicates) and pushes it: the server's optimizer updates the table, so the
  module has no parameters of its own and the dense optimizer never sees the embeddings.
- The push happens inside backward() (synchronously, on the thread that called backward,
  which is the one that owns the client for CPU tensors), so after loss.backward() the
  server has the batch's gradients and the caller may call client.step().
- prefetch(ids) pulls the next batch's rows while the current batch computes (pipelining);
  forward uses them when it is given the same ids. Prefetched rows were read before the
  current batch's push: one step stale, as any pipelined parameter server.
- The gradient handed to the server is d(loss)/d(row): scaling (e.g. by the batch size for a
  mean loss) is the caller's loss, as with torch.nn.EmbeddingBag and an optimizer."""
import numpy as np
import torch
import torch.nn.functional as F

__all__ = ["EmbeddingBag"]


def _keys_of(ids):
    if isinstance(ids, torch.Tensor):
        a = ids.detach().cpu().contiguous().numpy()
        return a.view(np.uint64) if a.dtype == np.int64 else a.astype(np.uint64)
    a = np.ascontiguousarray(ids)
    return a.view(np.uint64) if a.dtype == np.int64 else a.astype(np.uint64)


class _PullRows(torch.autograd.Function):
    """rows (the pulled unique rows) as an autograd leaf-like value; backward pushes their
    gradient to the table. `anchor` is an empty tensor that requires grad, so autograd
    records this function even though nothing else in its inputs does."""

    @staticmethod
    def forward(ctx, anchor, rows, table, ukeys):
        ctx.table, ctx.ukeys = table, ukeys
        return rows

    @staticmethod
    def backward(ctx, grad):
        g = grad.detach().to("cpu", torch.float32).contiguous().numpy()
        ctx.table.push(ctx.ukeys, g)
        return None, None, None, None


class EmbeddingBag(torch.nn.Module):
    """A bag of Ember rows per sample, pooled by `mode` ("sum", "mean" or "max"), like
    torch.nn.EmbeddingBag(num_embeddings, table.dim, mode=mode) with its weight in the table."""

    def __init__(self, table, mode="sum"):
        super().__init__()
        if mode not in ("sum", "mean", "max"):
            raise ValueError(f"mode {mode!r} is not sum, mean or max")
        self.table, self.mode = table, mode
        self._next = None  # (keys, unique, inverse, request) of a prefetch

    @property
    def embedding_dim(self):
        return self.table.dim

    def _unique(self, keys):
        flat = keys.reshape(-1)
        uk, inv = np.unique(flat, return_inverse=True)
        return uk, inv.reshape(keys.shape)

    def prefetch(self, ids):
        """Starts pulling the rows of a later forward(ids) (the same ids)."""
        keys = _keys_of(ids)
        uk, inv = self._unique(keys)
        self._next = (keys, uk, inv, self.table.pull_start(uk))

    def forward(self, ids, offsets=None, per_sample_weights=None):
        keys = _keys_of(ids)
        nxt, self._next = self._next, None
        if nxt is not None and nxt[0].shape == keys.shape and np.array_equal(nxt[0], keys):
            _, uk, inv, req = nxt
            rows = req.wait()
        else:
            if nxt is not None:
                nxt[3].wait()  # finish the unused prefetch: the client has one request in flight
            uk, inv = self._unique(keys)
            rows = self.table.pull(uk)
        anchor = torch.empty(0, requires_grad=torch.is_grad_enabled())
        w = _PullRows.apply(anchor, torch.from_numpy(rows), self.table, uk)
        idx = torch.from_numpy(inv.astype(np.int64))
        if offsets is not None and isinstance(offsets, torch.Tensor):
            offsets = offsets.to(torch.int64)
        return F.embedding_bag(idx, w, offsets, mode=self.mode,
                               per_sample_weights=per_sample_weights)

    def extra_repr(self):
        return f"{self.table!r}, mode={self.mode!r}"
