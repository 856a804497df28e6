/* module.h: the objects that python/ext's files share (one extension module, kiln._kiln). */
#ifndef KILN_PY_MODULE_H
#define KILN_PY_MODULE_H
#define Py_LIMITED_API 0x030B0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "../../include/kiln.h"

typedef struct {
  PyObject_HEAD
  kl_buffer *buf;
  void *host; /* GPU buffers: host copy made for the buffer protocol (owned), or NULL */
} BufferObject;

typedef struct {
  PyObject_HEAD
  struct kl_exec *x;
  int ninputs, noutputs;
} ExecObject;

extern PyObject *BufferType, *ExecType;

/* A new Buffer object owning (one reference of) b; releases b on failure. */
PyObject *buffer_new_from(kl_buffer *b);
/* After a launch of x with outputs outs[0..nout-1]: a CPU program with host callbacks has run
 * when this returns, as JAX's CPU client runs it before the call returns (what it prints is out;
 * the error a callback raised is the call's). 0, or -1 with the exception set (Ctrl-C too) and
 * the outputs released (outs[i] NULL). */
int kl_py_wait_callbacks(const kl_exec *x, kl_buffer **outs, int nout);

/* array.c: ArrayBase, the C half of kiln.Array (its fields, the buffer protocol, and the eager
 * fast path of + - * /); adds ArrayBase and eager_setup to the module. */
int kl_py_array_init(PyObject *module);
/* Computes every pending eager result (before memory is shared with another library, which may
 * write it). 0, or -1 with an exception. */
int kl_py_eager_flush(void);

/* The fields of ArrayBase that tracer.c's TracerBase (a subclass) needs: the size of the base
 * object, and its aval fields (set: new references taken; get: borrowed). */
Py_ssize_t kl_py_array_basicsize(void);
void kl_py_array_set_aval(PyObject *a, PyObject *shape, PyObject *dtype, PyObject *weak);
void kl_py_array_get_aval(PyObject *a, PyObject **shape, PyObject **dtype, PyObject **weak);

/* array.c, for tracer.c's dispatcher: whether o is a kiln.Array exactly (no Tracer), and bind's
 * eager road: prim[params] run on the kiln arrays xs[0..n-1] through the executable cache the
 * fast path shares; a tuple of Arrays, or NULL with an error. */
int kl_py_is_array(PyObject *o);
PyObject *kl_py_eager_bind(PyObject *prim, PyObject *const *xs, Py_ssize_t n, PyObject *params);

/* module.c, for tracer.c: params of `prim` from a dict of named params (None: defaults), vectors
 * stored in `store`; and a new Builder owning pg (freed on failure). */
int kl_py_parse_params(kl_prim prim, PyObject *dict, kl_params *p, int64_t store[8][64]);
/* The eager-cache key of a param value that is a body (a Builder): ("body", structural hash,
 * counts), equal for equal bodies (bodies never change); NULL without error for other values. */
PyObject *kl_py_body_key(PyObject *v);
/* Raises the exception of the core's last failure (ir/status.h: TypeError, ValueError,
 * IndexError, NotImplementedError, MemoryError, else RuntimeError) with message "<prefix>msg";
 * returns NULL. The class comes from the status, never from the text. */
PyObject *kl_py_raise(const char *prefix, const char *msg);
PyObject *kl_py_builder_wrap(kl_program *pg);
/* The program of a Builder (borrowed), or NULL with a TypeError when o is not one. */
kl_program *kl_py_builder_program(PyObject *o);
/* Whether o is a Builder (no error either way). */
int kl_py_is_builder(PyObject *o);
/* The equations of pg from index `from` on, as Builder.equations() lists them: (prim name, input
 * ids, output ids, params dict) each. */
PyObject *kl_py_program_equations(const kl_program *pg, int from);

/* tracer.c: the trace state's binding (Trace, TracerBase, trace_bind...); adds them to the
 * module. kl_py_tracing: whether a trace is live (the eager fast paths run only when not). */
int kl_py_tracer_init(PyObject *module);
int kl_py_tracing(void);
/* Whether o is a Tracer (of any trace). */
int kl_py_is_tracer(PyObject *o);

/* batch_rule.c: set_batch_handler, the Python side of user batching rules (custom_vmap_call). */
int kl_py_batch_rule_init(PyObject *module);
/* pytree.c: tree_setup, tree_flatten, tree_unflatten, the hot half of kiln.tree_util. */
int kl_py_pytree_init(PyObject *module);
/* profiler.c: the C half of kiln.profiler (trace_*, device_trace_*: host events and CUPTI's device
 * records); kl_py_prof_compile records a compile that began at t0 (trace.h) of program pg into x
 * (NULL: it failed). */
int kl_py_profiler_init(PyObject *module);
void kl_py_prof_compile(const struct kl_exec *x, const kl_program *pg, uint64_t t0);
/* testing.c: test-only entry points into core routines no public API reaches yet (_test_*). */
int kl_py_testing_init(PyObject *module);

#endif
