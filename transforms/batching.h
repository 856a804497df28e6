/* batching.h: vmap as a program-to-program pass. Every equation of a Program is rewritten by
 * its primitive's batching rule so that it computes all examples of a batch at once.
 * Depends only on ir/. */
#ifndef KL_BATCHING_H
#define KL_BATCHING_H
#include "../ir/program.h"

/* Batches pg over a new axis of extent `size` (>= 0).
 * in_axes[i] (pg->ninputs entries) is the axis where input i carries the batch dimension
 * (0..rank of the unbatched input), or -1 when input i is the same for every example.
 * The result's inputs are pg's inputs in order, with the batch dimension inserted at in_axes[i]
 * for the batched ones; its outputs are pg's outputs, with the batch dimension at axis 0 where
 * out_batched[i] (caller-owned, pg->noutputs entries) is set to 1, and unchanged (the same for
 * every example) where it is set to 0.
 * Returns an owned program (free with kl_program_free), or NULL with a message in err:
 * "vmap of <prim> is not supported yet" when a rule is missing. */
kl_program *kl_vmap(const kl_program *pg, const int *in_axes, int64_t size, char *out_batched, char *err,
                    size_t errlen);

/* A batching rule held outside the IR, by handle: a custom_vmap_call equation's (jax.custom_batching
 * .custom_vmap, or a library primitive's batching rule, in Python). Given the handle, the call's
 * operand types as vmap has them (in_batched[i]: operand i carries the batch at axis 0), and the
 * batch size, returns an owned program over exactly those operands, with one output per result of
 * the call, and sets out_batched[i] (1: batch at axis 0; 0: the same for every example); or NULL
 * with a message in err. The embedding installs it (python/ext); without one such a vmap fails. */
typedef kl_program *(*kl_user_batch_fn)(int64_t rule, int nin, const kl_aval *ins, const char *in_batched, int64_t size,
                                        char *out_batched, char *err, size_t errlen);
void kl_set_user_batch_fn(kl_user_batch_fn fn);
#endif
