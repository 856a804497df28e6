/* loop_cpu.c: the CPU's loop target. A while loop, or a scan without xs or ys (fori_loop), is
 * compiled whole: its condition's and body's kernels and one more function, the driver, in one
 * MLIR module, so the loop is a compiled loop whose small kernels LLVM inlines into it (no call
 * through the runtime per step and iteration). The driver reads its pointers from a table that
 * drive() fills from the bodies' bindings (runtime/cpu.c): the bindings fix every step's argument
 * pointers per set of carries, so one iteration is: pick the group of the carries' parity, call
 * each step with its pointers. Steps that are not small kernels (library calls, nested loops,
 * kernels worth threads) are called through a trampoline back into the runtime.
 *
 * The table (void *[]):
 *   [0] the trampoline, [1] the run's context (its first field: int32 failed), [2] a while loop's
 *   predicate byte, [3] where a while loop's final parity goes (int64);
 *   then groups, one per binding (while: condition then body for parity 0, the same for parity 1;
 *   scan: 9, per (read, write) as in loop.h), each: per step (its argument pointers, its binding),
 *   per output (its memory, where the steps leave it; copied when they differ).
 * Depends on runtime/ (bindings) and compile.c (kl_compile_cpu_loop). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/alloc.h"
#include "../ir/status.h"
#include "compile.h"
#include "loop.h"

enum { TAB_TRAMP, TAB_CTX, TAB_PRED, TAB_PARITY, TAB_STOP, TAB_GROUPS }; /* TAB_STOP: kl_rt_stop_flag() */
enum { TAB_STEP = 3 }; /* per step: its argument pointers, its binding, a compiled cond's plan */

static int group_size(const kl_exec *x) { return TAB_STEP * x->nsteps + 2 * x->noutputs; }

int kl_loop_slice_of(const kl_exec *x, const kl_loop_slices *sl, int slot) {
  if (!sl) return -1;
  for (int q = 0; q < sl->nx; q++)
    if (x->in_slots[sl->nk + sl->n + q] == slot) return kl_loop_staged(sl->xbytes[q]) ? -1 : q;
  for (int q = 0; q < sl->ny; q++)
    if (x->out_slots[sl->n + q] == slot) return kl_loop_staged(sl->ybytes[q]) ? -1 : sl->nx + q;
  return -1;
}

static int slice_of(const kl_loop_shape *sh, int slot) { return kl_loop_slice_of(sh->x, sh->sl, slot); }

/* Whether output i of x may be left elsewhere by the steps (an input passed through, an output
 * that repeats another): then the driver copies it when the binding says so. */
static int maybe_late(const kl_exec *x, int i) {
  int sl = x->out_slots[i];
  for (int j = 0; j < x->ninputs; j++)
    if (x->in_slots[j] == sl) return 1;
  for (int j = 0; j < i; j++)
    if (x->out_slots[j] == sl) return 1;
  return 0;
}

typedef struct {
  kl_str *out;
  int n; /* SSA names so far */
} emitter;

/* %v<k> = tab[base + off] (a pointer); returns k */
static int load_at(emitter *m, int base, int64_t off) {
  int k = m->n++;
  kl_str_printf(m->out,
                "    %%o%d = arith.constant %lld : i64\n"
                "    %%i%d = arith.addi %%v%d, %%o%d : i64\n"
                "    %%e%d = llvm.getelementptr %%tab[%%i%d] : (!llvm.ptr, i64) -> !llvm.ptr, !llvm.ptr\n"
                "    %%v%d = llvm.load %%e%d : !llvm.ptr -> !llvm.ptr\n",
                k, (long long)off, k, base, k, k, k, k, k);
  return k;
}

/* The pointers a directly called kernel reads, per binding, loaded once at the driver's entry
 * (the table is not read again inside the loop): pre[g][k] is the SSA name of group g's k-th
 * pointer among the direct steps' arguments; each step gets an entry-block array (alloca) that
 * the loop fills with the current binding's pointers before the call, so that once LLVM inlines
 * the kernel its argument loads fold into those values. */
typedef struct {
  int ngroups;   /* bindings */
  int *pre;      /* [group][direct argument] -> SSA number of %v */
  int nargs;     /* direct arguments in all */
  int *slot_arr; /* per step: the SSA number of its array, or -1 */
} hoisted;

static void hoist(emitter *m, const kl_loop_shape *sh, int ngroups, const int *group_base_of, hoisted *h) {
  const kl_exec *x = sh->x;
  h->ngroups = ngroups;
  h->nargs = 0;
  for (int s = 0; s < x->nsteps; s++)
    if (sh->fn[s] >= 0) h->nargs += x->steps[s].nslots;
  h->pre = kl_calloc((size_t)ngroups * (size_t)h->nargs + 1, sizeof(int));
  h->slot_arr = kl_calloc((size_t)x->nsteps + 1, sizeof(int));
  if (!h->pre || !h->slot_arr) {
    m->out->failed = 1;
    return;
  }
  for (int s = 0; s < x->nsteps; s++) {
    h->slot_arr[s] = -1;
    if (sh->fn[s] < 0) continue;
    int k = m->n++;
    kl_str_printf(m->out, "    %%an%d = arith.constant %d : i64\n    %%v%d = llvm.alloca %%an%d x !llvm.ptr : (i64) -> !llvm.ptr\n", k,
                  x->steps[s].nslots, k, k);
    h->slot_arr[s] = k;
  }
  for (int g = 0; g < ngroups; g++) {
    int at = 0;
    for (int s = 0; s < x->nsteps; s++) {
      if (sh->fn[s] < 0) continue;
      int a = load_at(m, 0, group_base_of[g] + TAB_STEP * s);
      for (int j = 0; j < x->steps[s].nslots; j++) {
        int k = m->n++;
        kl_str_printf(m->out,
                      "    %%e%d = llvm.getelementptr %%v%d[%d] : (!llvm.ptr) -> !llvm.ptr, !llvm.ptr\n"
                      "    %%v%d = llvm.load %%e%d : !llvm.ptr -> !llvm.ptr\n",
                      k, a, j, k, k);
        h->pre[g * h->nargs + at++] = k;
      }
    }
  }
}

static void hoisted_free(hoisted *h) {
  free(h->pre);
  free(h->slot_arr);
}

/* A compiled cond's plan (drive() writes it; the table holds its address): the predicate byte's
 * address, then per branch (false, true): per step its kernel and argument pointers, per output
 * its memory and where the steps leave it. */
static int plan_size(const kl_exec *x) { return 2 * x->nsteps + 2 * x->noutputs; }

/* %v<plan>[off...]: branch x's kernels called one after the other, then its late outputs copied. */
static void emit_branch(emitter *m, const kl_exec *x, int plan, int off) {
  for (int j = 0; j < x->nsteps; j++) {
    int q = m->n++;
    kl_str_printf(m->out,
                  "    %%fe%d = llvm.getelementptr %%v%d[%d] : (!llvm.ptr) -> !llvm.ptr, !llvm.ptr\n"
                  "    %%fp%d = llvm.load %%fe%d : !llvm.ptr -> !llvm.ptr\n"
                  "    %%ae%d = llvm.getelementptr %%v%d[%d] : (!llvm.ptr) -> !llvm.ptr, !llvm.ptr\n"
                  "    %%ap%d = llvm.load %%ae%d : !llvm.ptr -> !llvm.ptr\n"
                  "    %%xe%d = arith.constant %lld : i64\n"
                  "    llvm.call %%fp%d(%%ap%d, %%k0, %%xe%d) : !llvm.ptr, (!llvm.ptr, i64, i64) -> ()\n",
                  q, plan, off + 2 * j, q, q, q, plan, off + 2 * j + 1, q, q, q, (long long)x->steps[j].extent, q, q, q);
  }
  for (int i = 0; i < x->noutputs; i++) {
    if (!maybe_late(x, i)) continue;
    int q = m->n++, at = off + 2 * x->nsteps + 2 * i;
    kl_str_printf(m->out,
                  "    %%de%d = llvm.getelementptr %%v%d[%d] : (!llvm.ptr) -> !llvm.ptr, !llvm.ptr\n"
                  "    %%dp%d = llvm.load %%de%d : !llvm.ptr -> !llvm.ptr\n"
                  "    %%ce%d = llvm.getelementptr %%v%d[%d] : (!llvm.ptr) -> !llvm.ptr, !llvm.ptr\n"
                  "    %%cp%d = llvm.load %%ce%d : !llvm.ptr -> !llvm.ptr\n"
                  "    %%cn%d = llvm.icmp \"ne\" %%dp%d, %%cp%d : !llvm.ptr\n"
                  "    scf.if %%cn%d {\n"
                  "    %%cl%d = arith.constant %zu : i64\n"
                  "    \"llvm.intr.memcpy\"(%%dp%d, %%cp%d, %%cl%d) <{isVolatile = false}> : (!llvm.ptr, !llvm.ptr, i64) -> ()\n"
                  "    }\n",
                  q, plan, at, q, q, q, plan, at + 1, q, q, q, q, q, q, q, x->slot_bytes[x->out_slots[i]], q, q, q);
  }
}

/* A cond step whose branches are small kernels: its predicate read and the branch it names
 * called from the loop (plan: the SSA number of the plan's address). */
static void emit_cond(emitter *m, const kl_step *st, int plan) {
  kl_exec *bx[2];
  kl_loop_cond_branches(st, &bx[0], &bx[1]);
  int q = m->n++;
  kl_str_printf(m->out,
                "    %%pe%d = llvm.getelementptr %%v%d[0] : (!llvm.ptr) -> !llvm.ptr, !llvm.ptr\n"
                "    %%pq%d = llvm.load %%pe%d : !llvm.ptr -> !llvm.ptr\n"
                "    %%pb%d = llvm.load %%pq%d : !llvm.ptr -> i8\n"
                "    %%pc%d = arith.cmpi ne, %%pb%d, %%z8 : i8\n"
                "    scf.if %%pc%d {\n",
                q, plan, q, q, q, q, q, q, q);
  emit_branch(m, bx[1], plan, 1 + plan_size(bx[0]));
  kl_str_printf(m->out, "    } else {\n");
  emit_branch(m, bx[0], plan, 1);
  kl_str_printf(m->out, "    }\n");
}

/* One binding's group: its steps in order (a trampoline's failure skips the rest), then the
 * copies of late outputs. The binding is %v<base> (the table's index of its group, for the steps
 * run through the runtime), and, for the direct kernels' pointers, `sel`: the SSA name of the
 * group's number (i64) among h's, or NULL when h has one group. Returns the number k of %w<k>,
 * the pointer a direct kernel writes the first output through (-1: none does, or only one that
 * runs after a runtime step, inside its scf.if), so that the driver reads a while loop's
 * predicate through the same value (LLVM then forwards the store). */
static int emit_group(emitter *m, const kl_loop_shape *sh, int base, const hoisted *h, const char *sel) {
  const kl_exec *x = sh->x;
  int open = 0, at = 0, out0 = -1;
  for (int s = 0; s < x->nsteps; s++) {
    if (sh->fn[s] >= 0) {
      int arr = h->slot_arr[s];
      for (int j = 0; j < x->steps[s].nslots; j++, at++) {
        int v = h->pre[at], k = m->n++, q = slice_of(sh, x->steps[s].slots[j]); /* group 0's, then a select per other group */
        if (q >= 0) { /* this trip's slice */
          kl_str_printf(m->out,
                        "    %%se%d = llvm.getelementptr %%v%d[%d] : (!llvm.ptr) -> !llvm.ptr, !llvm.ptr\n"
                        "    llvm.store %%sp%d, %%se%d : !llvm.ptr, !llvm.ptr\n",
                        k, arr, j, q, k);
          continue;
        }
        kl_str_printf(m->out, "    %%w%d = llvm.bitcast %%v%d : !llvm.ptr to !llvm.ptr\n", k, v);
        for (int g = 1; g < h->ngroups && sel; g++) {
          int q = m->n++;
          kl_str_printf(m->out,
                        "    %%gc%d = arith.constant %d : i64\n"
                        "    %%gq%d = arith.cmpi eq, %s, %%gc%d : i64\n"
                        "    %%w%d = arith.select %%gq%d, %%v%d, %%w%d : !llvm.ptr\n",
                        q, g, q, sel, q, q, q, h->pre[g * h->nargs + at], k);
          k = q;
        }
        /* (not from inside a runtime step's scf.if: the value would not dominate the driver's read) */
        if (x->noutputs && x->steps[s].slots[j] == x->out_slots[0] && !open) out0 = k;
        kl_str_printf(m->out,
                      "    %%se%d = llvm.getelementptr %%v%d[%d] : (!llvm.ptr) -> !llvm.ptr, !llvm.ptr\n"
                      "    llvm.store %%w%d, %%se%d : !llvm.ptr, !llvm.ptr\n",
                      k, arr, j, k, k);
      }
      kl_str_printf(m->out, "    %%x%d = arith.constant %lld : index\n", arr, (long long)x->steps[s].extent);
      kl_str_printf(m->out, "    func.call @KLPFX%d(%%v%d, %%c0, %%x%d) : (!llvm.ptr, index, index) -> ()\n", sh->fn[s], arr, arr);
      continue;
    }
    if (sh->fn[s] == KL_LOOP_COND) {
      emit_cond(m, &x->steps[s], load_at(m, base, TAB_STEP * s + 2));
      continue;
    }
    for (int j = 0; j < x->steps[s].nslots; j++) { /* this trip's slices into the binding's pointers */
      int q = slice_of(sh, x->steps[s].slots[j]);
      if (q < 0) continue;
      int a = load_at(m, base, TAB_STEP * s);
      kl_str_printf(m->out,
                    "    %%te%d = llvm.getelementptr %%v%d[%d] : (!llvm.ptr) -> !llvm.ptr, !llvm.ptr\n"
                    "    llvm.store %%sp%d, %%te%d : !llvm.ptr, !llvm.ptr\n",
                    a, a, j, q, a);
    }
    int b = load_at(m, base, TAB_STEP * s + 1);
    kl_str_printf(m->out,
                  "    %%s%d = arith.constant %d : i64\n"
                  "    %%r%d = llvm.call %%tramp(%%ctx, %%v%d, %%s%d) : !llvm.ptr, (!llvm.ptr, !llvm.ptr, i64) -> i32\n"
                  "    %%q%d = arith.cmpi eq, %%r%d, %%z32 : i32\n"
                  "    scf.if %%q%d {\n",
                  b, s, b, b, b, b, b, b);
    open++;
  }
  for (int i = 0; i < x->noutputs; i++) {
    if (!maybe_late(x, i)) continue;
    int d = load_at(m, base, TAB_STEP * x->nsteps + 2 * i), s = load_at(m, base, TAB_STEP * x->nsteps + 2 * i + 1);
    kl_str_printf(m->out,
                  "    %%n%d = llvm.icmp \"ne\" %%v%d, %%v%d : !llvm.ptr\n"
                  "    scf.if %%n%d {\n"
                  "    %%l%d = arith.constant %zu : i64\n"
                  "    \"llvm.intr.memcpy\"(%%v%d, %%v%d, %%l%d) <{isVolatile = false}> : (!llvm.ptr, !llvm.ptr, i64) -> ()\n"
                  "    }\n",
                  d, d, s, d, d, x->slot_bytes[x->out_slots[i]], d, s, d);
  }
  while (open--) kl_str_append(m->out, "    }\n");
  return out0;
}

/* %v<k> = %<p> * size + off, the base of a group; returns k */
static int group_base(emitter *m, const char *p, int64_t size, int64_t off) {
  int k = m->n++;
  kl_str_printf(m->out,
                "    %%gs%d = arith.constant %lld : i64\n"
                "    %%go%d = arith.constant %lld : i64\n"
                "    %%gm%d = arith.muli %s, %%gs%d : i64\n"
                "    %%v%d = arith.addi %%gm%d, %%go%d : i64\n",
                k, (long long)size, k, (long long)off, k, p, k, k, k, k);
  return k;
}

/* How each trip reads whether to stop, as %fl (i32, nonzero: stop): the process's stop flag
 * (Ctrl-C, runtime.h), read volatile so that it is read every trip, or'ed with whether a step
 * failed when one can (one runs through the runtime: the run's context says). */
static const char *failed_flag(const kl_loop_shape *sh, int n) {
  for (int k = 0; k < n; k++)
    for (int s = 0; s < sh[k].x->nsteps; s++)
      if (sh[k].fn[s] == -1)
        return "    %fs = llvm.load volatile %stop : !llvm.ptr -> i32\n"
               "    %fc = llvm.load %ctx : !llvm.ptr -> i32\n"
               "    %fl = arith.ori %fs, %fc : i32\n";
  return "    %fl = llvm.load volatile %stop : !llvm.ptr -> i32\n";
}

void kl_loop_driver_emit(int scan, const kl_loop_shape *sh, const char *name, kl_str *mod) {
  emitter m = {mod, 0};
  kl_str_printf(mod,
                "  func.func @%s(%%tab: !llvm.ptr, %%lo: index, %%hi: index) {\n"
                "    %%c0 = arith.constant 0 : index\n"
                "    %%z32 = arith.constant 0 : i32\n"
                "    %%z8 = arith.constant 0 : i8\n"
                "    %%k0 = arith.constant 0 : i64\n"
                "    %%k1 = arith.constant 1 : i64\n"
                "    %%k2 = arith.constant 2 : i64\n"
                "    %%k3 = arith.constant 3 : i64\n"
                "    %%v0 = arith.constant 0 : i64\n",
                name);
  m.n = 1;
  int t = load_at(&m, 0, TAB_TRAMP), c = load_at(&m, 0, TAB_CTX), st = load_at(&m, 0, TAB_STOP);
  kl_str_printf(mod,
                "    %%tramp = llvm.bitcast %%v%d : !llvm.ptr to !llvm.ptr\n    %%ctx = llvm.bitcast %%v%d : !llvm.ptr to !llvm.ptr\n"
                "    %%stop = llvm.bitcast %%v%d : !llvm.ptr to !llvm.ptr\n",
                t, c, st);
  if (!scan) {
    int pr = load_at(&m, 0, TAB_PRED), pa = load_at(&m, 0, TAB_PARITY);
    int gc = group_size(sh[0].x), gb = group_size(sh[1].x);
    int cbase[2] = {TAB_GROUPS, TAB_GROUPS + gc + gb}, bbase[2] = {TAB_GROUPS + gc, TAB_GROUPS + 2 * gc + gb};
    hoisted hc, hb;
    hoist(&m, &sh[0], 2, cbase, &hc);
    hoist(&m, &sh[1], 2, bbase, &hb);
    if (mod->failed) { /* out of memory: the caller sees mod->failed */
      hoisted_free(&hc);
      hoisted_free(&hb);
      return;
    }
    kl_str_printf(mod, "    %%fin = scf.while (%%p = %%k0) : (i64) -> i64 {\n");
    int b = group_base(&m, "%p", gc + gb, TAB_GROUPS);
    int pw = emit_group(&m, &sh[0], b, &hc, "%p");
    char pname[32];
    snprintf(pname, sizeof pname, pw >= 0 ? "%%w%d" : "%%v%d", pw >= 0 ? pw : pr);
    kl_str_printf(mod,
                  "    %%pv = llvm.load %s : !llvm.ptr -> i8\n"
                  "%s"
                  "    %%g1 = arith.cmpi ne, %%pv, %%z8 : i8\n"
                  "    %%g2 = arith.cmpi eq, %%fl, %%z32 : i32\n"
                  "    %%go = arith.andi %%g1, %%g2 : i1\n"
                  "    scf.condition(%%go) %%p : i64\n"
                  "    } do {\n"
                  "    ^bb0(%%p2: i64):\n",
                  pname, failed_flag(sh, 2));
    b = group_base(&m, "%p2", gc + gb, TAB_GROUPS + gc);
    emit_group(&m, &sh[1], b, &hb, "%p2");
    hoisted_free(&hc);
    hoisted_free(&hb);
    kl_str_printf(mod,
                  "    %%np = arith.subi %%k1, %%p2 : i64\n"
                  "    scf.yield %%np : i64\n"
                  "    }\n"
                  "    llvm.store %%fin, %%v%d : i64, !llvm.ptr\n"
                  "    return\n  }\n",
                  pa);
    return;
  }
  int gb = group_size(sh[0].x), sbase[9];
  for (int g = 0; g < 9; g++) sbase[g] = TAB_GROUPS + g * gb;
  const kl_loop_slices *sl = sh[0].sl;
  int nsl = sl ? sl->nx + sl->ny : 0, *slv = kl_calloc(2 * (size_t)nsl + 1, sizeof(int));
  if (!slv) {
    mod->failed = 1;
    return;
  }
  for (int q = 0; q < nsl; q++) { /* each slice's memory and staging buffer, after the groups */
    slv[2 * q] = load_at(&m, 0, TAB_GROUPS + 9 * gb + 2 * q);
    slv[2 * q + 1] = load_at(&m, 0, TAB_GROUPS + 9 * gb + 2 * q + 1);
  }
  hoisted hs;
  hoist(&m, &sh[0], 9, sbase, &hs);
  if (mod->failed) {
    hoisted_free(&hs);
    free(slv);
    return;
  }
  kl_str_printf(mod,
                "    %%L = arith.index_cast %%hi : index to i64\n"
                "    %%Lm1 = arith.subi %%L, %%k1 : i64\n"
                "    %%end = scf.while (%%it = %%k0) : (i64) -> i64 {\n"
                "    %%c1 = arith.cmpi slt, %%it, %%L : i64\n"
                "%s"
                "    %%c2 = arith.cmpi eq, %%fl, %%z32 : i32\n"
                "    %%go = arith.andi %%c1, %%c2 : i1\n"
                "    scf.condition(%%go) %%it : i64\n"
                "    } do {\n"
                "    ^bb0(%%it2: i64):\n"
                /* read: init (0) first, then set 0 and set 1 in turn; write: set it & 1, the
                 * results (2) last */
                "    %%isf = arith.cmpi eq, %%it2, %%k0 : i64\n"
                "    %%im1 = arith.subi %%it2, %%k1 : i64\n"
                "    %%par = arith.andi %%im1, %%k1 : i64\n"
                "    %%r1 = arith.addi %%par, %%k1 : i64\n"
                "    %%rd = arith.select %%isf, %%k0, %%r1 : i64\n"
                "    %%isl = arith.cmpi eq, %%it2, %%Lm1 : i64\n"
                "    %%wp = arith.andi %%it2, %%k1 : i64\n"
                "    %%wr = arith.select %%isl, %%k2, %%wp : i64\n"
                "    %%r3 = arith.muli %%rd, %%k3 : i64\n"
                "    %%grp = arith.addi %%r3, %%wr : i64\n",
                failed_flag(sh, 1));
  if (nsl) /* the trip's slice: t = it, or length - 1 - it in reverse */
    kl_str_printf(mod, sl->reverse ? "    %%tt = arith.subi %%Lm1, %%it2 : i64\n" : "    %%tt = arith.addi %%it2, %%k0 : i64\n");
  for (int q = 0; q < nsl; q++) {
    size_t bytes = q < sl->nx ? sl->xbytes[q] : sl->ybytes[q - sl->nx];
    kl_str_printf(mod,
                  "    %%sb%d = arith.constant %zu : i64\n"
                  "    %%so%d = arith.muli %%tt, %%sb%d : i64\n"
                  "    %%sp%d = llvm.getelementptr %%v%d[%%so%d] : (!llvm.ptr, i64) -> !llvm.ptr, i8\n",
                  q, bytes, q, q, q, slv[2 * q], q);
    if (q < sl->nx && kl_loop_staged(bytes)) /* a staged x: copied in */
      kl_str_printf(mod, "    \"llvm.intr.memcpy\"(%%v%d, %%sp%d, %%sb%d) <{isVolatile = false}> : (!llvm.ptr, !llvm.ptr, i64) -> ()\n",
                    slv[2 * q + 1], q, q);
  }
  int b = group_base(&m, "%grp", gb, TAB_GROUPS);
  emit_group(&m, &sh[0], b, &hs, "%grp");
  for (int q = sl ? sl->nx : 0; q < nsl; q++) /* a staged y: copied out */
    if (kl_loop_staged(sl->ybytes[q - sl->nx]))
      kl_str_printf(mod, "    \"llvm.intr.memcpy\"(%%sp%d, %%v%d, %%sb%d) <{isVolatile = false}> : (!llvm.ptr, !llvm.ptr, i64) -> ()\n",
                    q, slv[2 * q + 1], q);
  hoisted_free(&hs);
  free(slv);
  kl_str_printf(mod,
                "    %%nx = arith.addi %%it2, %%k1 : i64\n"
                "    scf.yield %%nx : i64\n"
                "    }\n"
                "    return\n  }\n");
}

/* ---- running ---- */

typedef struct {
  int32_t failed; /* first: the driver reads it */
  char *err;
  size_t errlen;
} run_ctx;

static int32_t trampoline(run_ctx *r, const kl_cpu_bound *b, int64_t s) {
  if (!kl_cpu_bound_step(b, (int)s, r->err, r->errlen)) return 0;
  r->failed = 1;
  return 1;
}

static void fill_group(void **g, const kl_exec *x, const kl_cpu_bound *b) {
  for (int s = 0; s < x->nsteps; s++) {
    g[TAB_STEP * s] = kl_cpu_bound_args(b, s);
    g[TAB_STEP * s + 1] = (void *)b;
  }
  for (int i = 0; i < x->noutputs; i++)
    kl_cpu_bound_output(b, i, &g[TAB_STEP * x->nsteps + 2 * i], &g[TAB_STEP * x->nsteps + 2 * i + 1]);
}

/* The plans of a group's compiled conds (drive() keeps their branches bound while it runs). */
typedef struct {
  void **mem; /* plans and binding handles, freed after the run */
  int n, cap;
} drive_mem;

static int keep_mem(drive_mem *d, void *p) {
  if (d->n == d->cap) {
    int cap = d->cap ? 2 * d->cap : 16;
    void **m = kl_realloc(d->mem, sizeof(void *) * (size_t)cap);
    if (!m) return -1;
    d->mem = m;
    d->cap = cap;
  }
  d->mem[d->n++] = p;
  return 0;
}

/* A cond step's plan over its branches' bindings native[2] (malloc'd, or NULL). */
static void **make_plan(const kl_step *st, void **ptrs, void *const *native) {
  kl_exec *bx[2];
  kl_loop_cond_branches(st, &bx[0], &bx[1]);
  void **plan = kl_malloc(sizeof(void *) * (size_t)(1 + plan_size(bx[0]) + plan_size(bx[1])));
  if (!plan) return NULL;
  plan[0] = ptrs[0];
  for (int k = 0, at = 1; k < 2; k++) {
    for (int j = 0; j < bx[k]->nsteps; j++, at += 2) {
      kl_kernel_fn fn = kl_cpu_direct_fn(&bx[k]->steps[j]);
      memcpy(&plan[at], &fn, sizeof fn);
      plan[at + 1] = kl_cpu_bound_args(native[k], j);
    }
    for (int i = 0; i < bx[k]->noutputs; i++, at += 2) kl_cpu_bound_output(native[k], i, &plan[at], &plan[at + 1]);
  }
  return plan;
}

/* Each cond step of binding b that the driver may branch in (its branches all small kernels):
 * its plan in the group's third entry, over branches bound for the step's pointers (kept with the
 * cond across runs, or bound for this run when it keeps no more). */
static int plan_conds(void **g, const kl_exec *x, const kl_cpu_bound *b, drive_mem *d, char *err, size_t errlen) {
  for (int s = 0; s < x->nsteps; s++) {
    const kl_step *st = &x->steps[s];
    if (!kl_cpu_cond_direct(st)) continue;
    void *native[2], **plan = NULL, **ptrs = kl_cpu_bound_args(b, s);
    int kept = kl_loop_cond_kept(st, ptrs, native, &plan, make_plan, err, errlen);
    if (kept < 0) return -1;
    if (!kept) {
      void *h = kl_loop_cond_bind(st, ptrs, native, err, errlen);
      if (!h) return -1;
      if (keep_mem(d, h)) {
        kl_loop_cond_unbind(h);
        return kl_error(err, errlen, KL_ERR_NOMEM, "out of host memory running a loop");
      }
      if (!(plan = make_plan(st, ptrs, native)) || keep_mem(d, plan)) {
        free(plan);
        return kl_error(err, errlen, KL_ERR_NOMEM, "out of host memory running a loop");
      }
    }
    g[TAB_STEP * s + 2] = plan;
  }
  return 0;
}

static const void *first_bound(void *const *bound) {
  for (int k = 0; k < 9; k++)
    if (bound[k]) return bound[k];
  return NULL;
}

static int any_cond(const kl_exec *x) {
  for (int s = 0; x && s < x->nsteps; s++)
    if (kl_cpu_cond_direct(&x->steps[s])) return 1;
  return 0;
}

static void free_mem(drive_mem *d) {
  for (int i = 0; i < d->n; i++) { /* handles and plans alternate: a handle, then its plan */
    if (i % 2 == 0) kl_loop_cond_unbind(d->mem[i]);
    else free(d->mem[i]);
  }
  free(d->mem);
}

static int cpu_drive(void *driver, int scan, const kl_exec *xfirst, const kl_exec *xbody, void *const *bound, int64_t length,
                     void *const *slices, int nslices, int *parity, char *err, size_t errlen) {
  int gc = scan ? 0 : group_size(xfirst), gb = group_size(xbody), ngroups = scan ? 9 : 2;
  size_t n = TAB_GROUPS + (size_t)ngroups * (size_t)(gc + gb) + 2 * (size_t)nslices;
  void *small[512], **tab = n <= 512 ? small : kl_malloc(sizeof(void *) * (n + 1));
  if (!tab) return kl_error(err, errlen, KL_ERR_NOMEM, "out of host memory running a loop");
  memset(tab, 0, sizeof(void *) * (n <= 512 ? n : n + 1));
  run_ctx r = {0, err, errlen};
  drive_mem dm = {NULL, 0, 0};
  int rc = 0, cf = !scan && any_cond(xfirst), cb = any_cond(xbody); /* conds the driver branches on: plans */
  int64_t fin = 0;
  void *pred = NULL, *src;
  int32_t (*tr)(run_ctx *, const kl_cpu_bound *, int64_t) = trampoline;
  memcpy(&tab[TAB_TRAMP], &tr, sizeof tr);
  tab[TAB_CTX] = &r;
  tab[TAB_PARITY] = &fin;
  tab[TAB_STOP] = (void *)kl_rt_stop_flag();
  for (int g = 0; g < ngroups; g++) {
    void **at = tab + TAB_GROUPS + (size_t)g * (size_t)(gc + gb);
    if (scan) { /* an unused binding: any bound one's pointers (the driver loads them all) */
      const void *b = bound[g];
      for (int k = 0; k < 9 && !b; k++) b = bound[k];
      if (b) fill_group(at, xbody, b);
      int same = -1; /* a group of the same binding has the same plans */
      for (int e = 0; e < g && same < 0 && cb; e++)
        if (bound[e] == b || (!bound[e] && first_bound(bound) == b)) same = e;
      if (b && cb && same >= 0)
        for (int s = 0; s < xbody->nsteps; s++) at[TAB_STEP * s + 2] = tab[TAB_GROUPS + (size_t)same * (size_t)gb + TAB_STEP * (size_t)s + 2];
      else if (b && cb && !rc)
        rc = plan_conds(at, xbody, b, &dm, err, errlen);
      continue;
    }
    fill_group(at, xfirst, bound[2 * g]);
    fill_group(at + gc, xbody, bound[2 * g + 1]);
    if (cf && !rc) rc = plan_conds(at, xfirst, bound[2 * g], &dm, err, errlen);
    if (cb && !rc) rc = plan_conds(at + gc, xbody, bound[2 * g + 1], &dm, err, errlen);
  }
  memcpy(tab + TAB_GROUPS + (size_t)ngroups * (size_t)(gc + gb), slices, sizeof(void *) * 2 * (size_t)nslices);
  if (!scan) kl_cpu_bound_output(bound[0], 0, &pred, &src);
  tab[TAB_PRED] = pred;
  if (!rc) ((kl_kernel_fn)driver)(tab, 0, length);
  free_mem(&dm);
  if (tab != small) free(tab);
  if (parity) *parity = (int)fin;
  if (!rc && !r.failed && kl_rt_stop_check(err, errlen)) return -1;
  return rc || r.failed ? -1 : 0;
}

static int cpu_compile_loop(kl_program *first, kl_program *body, int scan, const kl_loop_slices *sl, kl_exec **xfirst,
                            kl_exec **xbody, void **driver, char *err, size_t errlen) {
  kl_kernel_fn fn = NULL;
  int rc = kl_compile_cpu_loop(first, body, scan, sl, xfirst, xbody, &fn, err, errlen);
  memcpy(driver, &fn, sizeof fn < sizeof *driver ? sizeof fn : sizeof *driver);
  return rc;
}

static int cpu_alloc(size_t n, void **p, char *err, size_t errlen) {
  *p = kl_malloc(n);
  return *p ? 0 : kl_error(err, errlen, KL_ERR_NOMEM, "out of host memory for a loop's carries (%zu bytes)", n);
}

static void cpu_free(void *p, size_t n) {
  (void)n;
  free(p);
}

static int cpu_copy(void *dst, const void *src, size_t n, char *err, size_t errlen) {
  (void)err, (void)errlen;
  memcpy(dst, src, n);
  return 0;
}

static int cpu_zero(void *dst, size_t n, char *err, size_t errlen) {
  (void)err, (void)errlen;
  memset(dst, 0, n);
  return 0;
}

static void *cpu_bind(kl_exec *x, void *const *in, void *const *out, char *err, size_t errlen) {
  return kl_cpu_bind(x, in, out, err, errlen);
}
static int cpu_bound_run(const void *b, char *err, size_t errlen) { return kl_cpu_bound_run(b, err, errlen); }
static void cpu_unbind(void *b) { kl_cpu_unbind(b); }
static void cpu_retarget(void *b, void *const *in, void *const *out) { kl_cpu_bound_retarget(b, in, out); }

static void **cpu_bound_args(void *b, int s) { return kl_cpu_bound_args(b, s); }
static kl_exec *compile_body(kl_program *pg, char *err, size_t errlen) { return kl_compile_cpu(pg, NULL, err, errlen); }

const kl_loop_target kl_loop_cpu = {compile_body, kl_cpu_exec_run, cpu_alloc, cpu_free, cpu_copy, cpu_copy, cpu_zero,
                                    cpu_bind, cpu_bound_run, cpu_unbind, cpu_compile_loop, cpu_drive, NULL, NULL, NULL,
                                    cpu_retarget, NULL, NULL, NULL, NULL, NULL, cpu_bound_args};
