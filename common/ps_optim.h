/* ps_optim: the sparse optimizers' arithmetic on one f32 row -- what a push does to a row and
 * what a row's optimizer state is before any push. One definition shared by the store (every
 * push a shard applies, embedding/ps_store_optim.c) and ps-worker's deep lookahead (the same
 * update applied by the worker to the rows it holds, worker/ps_train_deep.c), so the two give
 * the same bits by construction: one function, compiled once.
 *
 * SGD, Adagrad and Adam follow torch.optim's float32 arithmetic operation by operation;
 * row-wise Adagrad and FTRL use double intermediates and store float (their numpy references
 * are in tests/embedding/). */
#ifndef PS_OPTIM_H
#define PS_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "ps_table.h"

/* Floats of optimizer state a row of this spec keeps after its values (Adam's step count is
 * not among them: a uint32 of its own). */
size_t ps_optim_state_floats(const ps_table_spec *sp);

/* Floats of a row with its state, as a PULL with_state carries it (docs/PROTOCOL.md): the dim
 * values, the state floats and, for Adam, its step count (a uint32's bits). */
size_t ps_optim_row_floats(const ps_table_spec *sp);

/* The state of a row no push has reached (initial_accumulator where the optimizer has one);
 * *adam_t (Adam only; NULL otherwise) to 0. */
void ps_optim_init_state(const ps_table_spec *sp, float *st, uint32_t *adam_t);

/* Applies one (already summed) gradient g[dim] to the f32 values w[dim] and state st;
 * adam_t: Adam's per-row step count (NULL for the other optimizers). */
void ps_optim_apply(const ps_table_spec *sp, float *w, float *st, uint32_t *adam_t,
                    const float *g);

#endif
