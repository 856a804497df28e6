/* loc.h: where a user wrote a functional update, and what kiln does when one has to copy.
 *
 * x.at[i].set(v), lax.dynamic_update_slice and lax.scatter record the user's source line (an
 * interned id in their `loc` param) while the copy log or the forbid-copies option is on. The
 * compilers and the runtime call kl_copy_report for an update that cannot write into its
 * operand's buffer: it prints a line to stderr (KILN_LOG_COPIES / kiln_log_copies), or fails
 * with KL_ERR_COPY (kiln_forbid_copies). Depends only on ir/status. */
#ifndef KL_LOC_H
#define KL_LOC_H
#include <stddef.h>

#include "status.h"

/* The id of a location text ("file.py:12"), the same for the same text; 0 when out of memory. */
int kl_loc_intern(const char *text);
/* The text of id (borrowed, kept for the process), or "" for 0 or an unknown id. */
const char *kl_loc_text(int id);

enum { KL_COPIES_LOG = 1, KL_COPIES_FORBID = 2 };
void kl_copies_set_mode(int mode); /* KL_COPIES_* bits */
int kl_copies_mode(void);

/* Why an update copied (the message's second half). */
typedef enum {
  KL_COPY_INPUT,        /* its operand is an input of the program, not donated */
  KL_COPY_NOT_DONATED,  /* its operand's argument is donated, but this call's array could not be */
  KL_COPY_LIVE,         /* its operand is read again after the update */
  KL_COPY_OUTPUT,       /* its operand is also a result of the program */
  KL_COPY_CARRY,        /* a loop carry whose old value the body still reads after the update */
  KL_COPY_LOOP_INPUT,   /* inside a loop body, of a constant or a scanned slice, not a carry */
  KL_COPY_BRANCH        /* inside a cond branch, of the branch's operand */
} kl_copy_why;

/* Reports that an update (prim's name, its operand's type text "float32[1024]", bytes copied)
 * at loc copies its operand. per_trip: once per loop trip. Returns 0 (logged, or nothing to do)
 * or -1 with a message and KL_ERR_COPY when copies are forbidden. Updates without a location
 * (made by kiln itself: gradients, batching) are never reported. */
int kl_copy_report(int loc, const char *prim, const char *type, size_t bytes, kl_copy_why why, int per_trip, char *err,
                   size_t errlen);
#endif
