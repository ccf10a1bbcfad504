/* ps_dlrm: the dense half of DLRM (bottom MLP, dot or DCNv2 interaction, top MLP, sigmoid-BCE)
 * over a ps_kern compute backend.
 *
 * Design decisions:
 * - The model runs ONLY through ps_kernels.h, so the same code drives the CPU and CUDA
 *   backends. All dense parameters live in ONE contiguous backend buffer and the gradients in
 *   another with the same layout (allreduce = one call, optimizer = one call, checkpoint = one
 *   write). Layout: for each layer, bottom first then top, W [out, in] row-major (torch's
 *   nn.Linear.weight) then b [out] — the order of DLRM_Net's bot_l/top_l parameters().
 * - Every layer is Linear + ReLU except the top's last, whose sigmoid is fused into the BCE
 *   loss — as the DLRM reference (dlrm_s_pytorch.py: sigmoid_bot = -1, sigmoid_top = last).
 * - Activations and workspace are allocated once, for cfg.max_batch samples; the gathered
 *   embedding rows and bag indices use buffers sized for one-hot bags (batch * num_sparse)
 *   that grow only if a multi-hot batch needs more. A steady-state step allocates nothing.
 * - Embedding rows come in as a gathered buffer of UNIQUE rows with bag indices into it
 *   (what the PS client pulls after dedup); backward returns one gradient row per unique row,
 *   ready to push.
 *
 * MLP strings: --mlp-bot "13-512-256-64-16" lists every width, input first: 13 dense features,
 * and the last width must equal emb_dim. --mlp-top "512-256-1" lists the OUTPUT widths of the
 * top layers; the input width, emb_dim + F(F-1)/2 with F = 1 + num_sparse (367 for the Kaggle
 * shape), is always prepended, as the DLRM reference does (arch_mlp_top_adjusted =
 * str(num_int) + "-" + arch_mlp_top). The last top width must be 1 (the logit).
 *
 * Interaction: PS_DLRM_DOT (the default, above) or PS_DLRM_DCN, the DCNv2 cross network of
 * MLPerf DLRMv2 (TorchRec's LowRankCrossNet; CrossNet for full rank), in ps_dlrm_dcn.c:
 *   x0 = [bottom output | pooled embedding of each sparse feature], D = (1 + num_sparse) emb_dim
 *   x_{l+1} = x0 * (U_l (V_l x_l) + b_l) + x_l     for l = 0 .. dcn_layers - 1
 * with V_l [R, D], U_l [D, R], R = dcn_rank; dcn_rank 0 is full rank, W_l [D, D] in place of
 * U_l V_l. The top MLP takes x_L: its prepended input width is D (432 for the Kaggle shape).
 * Flat layout with DCN: bottom layers, then the cross block, then the top layers; the block
 * is, per layer l in order, V_l [R, D] then U_l [D, R] then b_l [D] (full rank: W_l [D, D]
 * then b_l [D]), all row-major as torch stores V_kernels[l], W_kernels[l] (TorchRec's name
 * for U) and bias[l]. Init as TorchRec: V, U, W xavier-normal, N(0, sqrt(2 / (fan_in +
 * fan_out))), biases zero. A dot model's layout is unchanged by all this. */
#ifndef PS_DLRM_H
#define PS_DLRM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ps_kernels.h"
#include "ps_status.h"

#define PS_DLRM_MAX_LAYERS 32
#define PS_DLRM_MAX_CROSS 64 /* --dcn-layers */
#define PS_DLRM_RANK_AUTO (-1) /* --dcn-rank: D / 4, TorchRec's rule for full-rank accuracy */

typedef enum ps_dlrm_interaction { PS_DLRM_DOT = 0, PS_DLRM_DCN = 1 } ps_dlrm_interaction;

typedef struct ps_dlrm_config {
  const char *mlp_bot;  /* "13-512-256-64-16" */
  const char *mlp_top;  /* "512-256-1" */
  int emb_dim;          /* 16 */
  int num_sparse;       /* 26 categorical features = embedding tables */
  int max_batch;        /* workspace size; larger batches are refused */
  ps_kern_pool pool;    /* bag pooling: SUM (DLRM's default), MEAN, or per feature (period =
                         * num_sparse) */
  uint64_t seed;        /* parameter init; same seed => same replica on every worker */
  ps_dlrm_interaction interaction; /* DOT (default) or DCN */
  int dcn_layers;       /* DCN: cross layers, 1..PS_DLRM_MAX_CROSS (default 3, as MLPerf) */
  int dcn_rank;         /* DCN: rank R of U_l V_l, 0 = full-rank W_l, PS_DLRM_RANK_AUTO
                         * (default) = D / 4 (108 for the Kaggle shape) */
  bool out_bias_zero;   /* the output layer's one bias starts at 0, not at DLRM's N(0, 1) draw
                         * (the draw is still taken, so every other parameter is the same) */
  ps_kern_prec precision; /* of the dense GEMMs, forward and backward (FP32 by default); with
                           * bf16 the parameters, gradients, optimizer state and element-wise
                           * ops stay FP32, as torch.autocast. A backend without a bf16 GEMM
                           * logs one warning and runs FP32 (ps_dlrm_precision says which). */
} ps_dlrm_config;

/* Fills cfg with the Kaggle shape: 13-512-256-64-16, 512-256-1, dim 16, 26 tables, batch 2048,
 * SUM pooling, seed 1, dot interaction (DCN fields at their defaults: 3 layers, rank auto). */
void ps_dlrm_config_default(ps_dlrm_config *cfg);
/* Fills cfg with another shape: the MLPs, embedding dim, sparse features and batch size
 * given, everything else (pooling, seed) at its default. */
void ps_dlrm_config_shape(ps_dlrm_config *cfg, const char *mlp_bot, const char *mlp_top,
                          int emb_dim, int num_sparse, int max_batch);

typedef enum ps_dlrm_opt_kind {
  PS_DLRM_OPT_SGD = 0,
  PS_DLRM_OPT_ADAGRAD = 1,
  PS_DLRM_OPT_ADAM = 2
} ps_dlrm_opt_kind;

/* Dense optimizer, torch.optim semantics (see ps_kern_sgd/adagrad/adam). */
typedef struct ps_dlrm_opt {
  ps_dlrm_opt_kind kind;
  float lr;
  float weight_decay;
  float eps;       /* Adagrad 1e-10, Adam 1e-8 (torch defaults) */
  float beta1;     /* Adam 0.9 */
  float beta2;     /* Adam 0.999 */
  float lr_decay;  /* Adagrad 0 */
} ps_dlrm_opt;

/* torch's defaults for `kind` with learning rate lr. */
ps_dlrm_opt ps_dlrm_opt_default(ps_dlrm_opt_kind kind, float lr);
/* "sgd", "adagrad", "adam" -> kind; PS_ERR_INVALID otherwise. */
ps_status ps_dlrm_opt_parse(const char *name, ps_dlrm_opt_kind *kind);

/* "dot", "dcn" -> interaction; PS_ERR_INVALID otherwise. */
ps_status ps_dlrm_interaction_parse(const char *name, ps_dlrm_interaction *out);
/* The DCN shape rules, for callers that check flags before building a model: layers in
 * 1..PS_DLRM_MAX_CROSS, rank 0 (full), PS_DLRM_RANK_AUTO or 1..D-1 with D = (1 + num_sparse) *
 * emb_dim (a rank of D or more costs more than full rank and expresses nothing more).
 * PS_ERR_INVALID with err naming the flag ("dcn-rank 500: ..."). */
ps_status ps_dlrm_check_cross(int num_sparse, int emb_dim, int layers, int rank, ps_error *err);
/* The rank a DCN model of this shape uses: rank itself, or for PS_DLRM_RANK_AUTO D / 4 (at
 * least 1) — the rank TorchRec's LowRankCrossNet documentation gives for full-rank accuracy. */
int ps_dlrm_cross_rank(int num_sparse, int emb_dim, int rank);

/* One batch, in HOST memory. Bag b * num_sparse + s is feature s of sample b; its entries are
 * idx[offsets[bag] .. offsets[bag+1]-1], indices into rows. With a host-memory backend (CPU) the
 * model reads these arrays in place: they must stay valid and unchanged until backward returns. */
typedef struct ps_dlrm_batch {
  int batch;               /* samples, 1..max_batch */
  const float *dense;      /* [batch, num_dense] (already transformed, e.g. log(1+x)) */
  const float *labels;     /* [batch], 0 or 1; may be NULL for predict */
  int nrows;               /* unique embedding rows gathered */
  const float *rows;       /* [nrows, emb_dim] */
  int nnz;                 /* total bag entries */
  const int32_t *idx;      /* [nnz], values in [0, nrows) */
  const int32_t *offsets;  /* [batch * num_sparse + 1], offsets[0] = 0, ... = nnz */
  bool rows_pinned;        /* rows is ps_kern_host_alloc memory of the model's backend, unchanged
                            * until ps_dlrm_forward returns: a device backend uploads it with
                            * no staging copy (ps_kern_to_device_pinned) */
} ps_dlrm_batch;

/* One linear layer's place in the flat parameter buffer (offsets in floats). */
typedef struct ps_dlrm_layer {
  int in, out;
  size_t w_off;  /* W [out, in] */
  size_t b_off;  /* b [out] */
  int relu;      /* 1 for every layer but the top's last */
} ps_dlrm_layer;

/* One DCN cross layer's place in the flat parameter buffer (offsets in floats). Low rank:
 * V [rank, dim] at v_off, U [dim, rank] at u_off (w_off unused, 0); full rank (rank 0):
 * W [dim, dim] at w_off (v_off, u_off unused). b [dim] at b_off. */
typedef struct ps_dlrm_cross_layer {
  int dim, rank;
  size_t v_off, u_off, w_off, b_off;
} ps_dlrm_cross_layer;

typedef struct ps_dlrm ps_dlrm;

/* Parses cfg, validates shapes, allocates parameters, gradients and workspace on backend k
 * (which the model borrows: destroy the model first), and initialises the parameters as the
 * DLRM reference: W ~ N(0, sqrt(2 / (in + out))), b ~ N(0, sqrt(1 / out)), except the output
 * layer's bias where cfg->out_bias_zero (ps-worker's default). A bad shape is
 * PS_ERR_INVALID with err naming the flag's value ("mlp-top '32-2' must end in 1 ..."). */
ps_status ps_dlrm_create(ps_kern *k, const ps_dlrm_config *cfg, ps_dlrm **out, ps_error *err);
void ps_dlrm_destroy(ps_dlrm **m);

/* Training forward: keeps the activations for backward. loss (host, may be NULL) gets the
 * mean BCE; labels are required. */
ps_status ps_dlrm_forward(ps_dlrm *m, const ps_dlrm_batch *b, float *loss);
/* Backward of the last forward: writes every dense gradient into the gradient buffer
 * (overwriting it) and, if emb_grad (host, [nrows, emb_dim]) is not NULL, the gradient of the
 * mean loss with respect to each unique row (zero for rows no bag used). */
ps_status ps_dlrm_backward(ps_dlrm *m, float *emb_grad);
/* Applies the optimizer to the parameters with the gradient buffer (after any allreduce). */
ps_status ps_dlrm_step(ps_dlrm *m, const ps_dlrm_opt *opt);
/* Eval forward: probs (host, [batch]) = sigmoid(logit). Labels are ignored. Overwrites the
 * activations of a training forward. */
ps_status ps_dlrm_predict(ps_dlrm *m, const ps_dlrm_batch *b, float *probs);
/* After ps_dlrm_forward: copies the probabilities of that forward to host probs [batch]. */
ps_status ps_dlrm_last_probs(ps_dlrm *m, float *probs);

/* The flat buffers (backend memory) and their length in floats. */
size_t ps_dlrm_num_params(const ps_dlrm *m);
float *ps_dlrm_grads(ps_dlrm *m);
/* Host copies in and out of those buffers (n must equal ps_dlrm_num_params). */
ps_status ps_dlrm_get_params(ps_dlrm *m, float *host, size_t n);
ps_status ps_dlrm_set_params(ps_dlrm *m, const float *host, size_t n);
ps_status ps_dlrm_get_grads(ps_dlrm *m, float *host, size_t n);

/* Shape: layers 0 .. num_bot-1 are the bottom MLP, then num_top top layers. */
int ps_dlrm_num_layers(const ps_dlrm *m, int *num_bot, int *num_top);
ps_status ps_dlrm_layer_info(const ps_dlrm *m, int i, ps_dlrm_layer *out);
int ps_dlrm_num_dense(const ps_dlrm *m);
/* The precision the GEMMs run at: cfg.precision, or FP32 where the backend lacks bf16. */
ps_kern_prec ps_dlrm_precision(const ps_dlrm *m);
/* "fp32", "bf16" -> precision; PS_ERR_INVALID otherwise. */
ps_status ps_dlrm_precision_parse(const char *name, ps_kern_prec *out);
/* DCN cross layers (0 for the dot interaction) and layer l's place in the flat buffers. */
int ps_dlrm_num_cross(const ps_dlrm *m);
ps_status ps_dlrm_cross_info(const ps_dlrm *m, int l, ps_dlrm_cross_layer *out);
int ps_dlrm_interact_width(const ps_dlrm *m);
/* Dense FLOPs of forward + backward per sample (GEMMs only: 6 * sum of in * out, and for DCN
 * 6 * 2 D R per low-rank layer, 6 * D * D per full-rank one). */
double ps_dlrm_flops_per_sample(const ps_dlrm *m);

/* Parses "13-512-256" into dims (at most max); returns the count, or -1 on a bad string. */
int ps_dlrm_parse_mlp(const char *s, int *dims, int max);


/* Optimizer state, for checkpoints: kind (-1 before the first ps_dlrm_step, else a
 * ps_dlrm_opt_kind), its step count, and opt_state_len floats (Adagrad's sums; Adam's m then
 * v). set restores exactly what get returned, so a resumed run continues bit-identically. */
size_t ps_dlrm_opt_state_len(const ps_dlrm *m);
ps_status ps_dlrm_get_opt_state(ps_dlrm *m, int *kind, int64_t *step, float *host, size_t n);
ps_status ps_dlrm_set_opt_state(ps_dlrm *m, int kind, int64_t step, const float *host, size_t n);

#endif
