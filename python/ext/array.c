/* array.c: ArrayBase, the C half of kiln.Array, and JitBase, the C half of kiln.jit's wrapper.
 *
 * ArrayBase holds an array's fields (its Buffer, shape, dtype, weak type and cached host view),
 * gives kiln.Array the buffer protocol, and runs the common eager operations without entering
 * Python: + - * / on two arrays of one dtype and shape (or one of them 0-d), or an array and a
 * Python scalar, plus the lax operations listed in op_prim (through eager_apply). Their results
 * stay pending and chains of them run as one fused kernel (eager fusion, below). Every other case
 * goes to the Python implementation given to eager_setup, so the results and the errors are the
 * same on both roads. bind's eager road (kl_py_eager_bind, called by tracer.c's dispatcher) runs
 * any primitive on concrete arrays through the same executable cache (exe_cache). JitBase runs
 * jit calls of a signature seen before. */
#include "module.h"

#include <limits.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <structmember.h>

typedef struct ArrayObject {
  PyObject_HEAD
  PyObject *buf, *shape, *dtype, *weak, *np;
  /* A pending result of the fast path (buf == NULL): op applied to pl, pr (kiln.Arrays, each
   * computed or pending); `nodes` counts the pending operations it stands for, and `consumed`
   * says another pending result uses it (so dropping it loses nothing). */
  struct ArrayObject *pl, *pr;
  int op, nodes, consumed;
  struct ArrayObject *prev, *next; /* the list of pending arrays (kl_py_eager_flush) */
} ArrayObject;

/* The operations of the fast path: the operators first (their Python fallbacks are indexed by
 * code), then other binary ones, then unary ones (from OP_NEG). */
enum { OP_ADD, OP_SUB, OP_MUL, OP_DIV, NOPERATORS, OP_MAX = NOPERATORS, OP_MIN, OP_NEG, OP_ABS, OP_EXP, OP_LOG,
       OP_LOG1P, OP_EXPM1, OP_TANH, OP_LOGISTIC, OP_SIN, OP_COS, OP_SQRT, OP_RSQRT, NOPS };
static const char *const op_prim[NOPS] = {"add", "sub", "mul",   "div",   "max",      "min", "neg", "abs",  "exp",
                                          "log", "log1p", "expm1", "tanh", "logistic", "sin", "cos", "sqrt", "rsqrt"};

/* Set once by eager_setup (kiln._src.array_methods): the Python pieces the fast path shares. */
static PyTypeObject *array_type;   /* kiln.Array itself (not its subclasses, e.g. Tracer) */
static PyObject *deleted;          /* the buf of a deleted array (Array.delete): no Buffer */
static PyObject *scalar_cache;     /* core._scalar_cache: (type, value, dtype, weak) -> 0-d Array */
static PyObject *scalar_fn;        /* core.scalar_array(value, dtype, weak) */
static PyObject *entry_fn;         /* dispatch._eager_entry(prim, params, xs, compiled) -> (exe or None, avals) */
static PyObject *fallback[NOPERATORS]; /* the Python operators: f(left, right) */
/* The one executable cache of eager mode, shared by bind's eager road and the fast path:
 *   (prim, [params key,] shape, dtype key, weak of each operand...) -> (exe or None, avals), where
 *   the params key ((name, value), ...) is left out when there are no params (its presence shows
 *   in the length: 1 + 3 * operands without), and the dtype key is dtype_key's; and where
 *   avals = ((shape, dtype, weak) of each result, ...) and exe is None for an entry known only by
 *   its avals (a fused operation needs no executable of its own); entries are stored as
 *   (exe or None, avals, shape, dtype, weak of the first result) for the fast path;
 *   (n, ... a fused chain, see materialize) -> exe of the chain. */
static PyObject *exe_cache;        /* (that of the process-wide configuration state; see config_changed) */
static PyObject *fused_fn;         /* dispatch._fused_exe(key) -> exe of a chain of pending operations */
static PyObject *op_name[NOPS];    /* op_prim as str objects (the first item of a cache key) */
static PyObject *no_params;        /* () : params_key of a call without params */
static int fusion = 1;             /* KILN_EAGER_FUSION=0: every operation launches at once */
static PyObject *eager_check;      /* jax_debug_nans/infs: check(prim name, results) after each eager op */
static long n_chains, n_chain_ops; /* fused launches, and the operations they ran */

/* The k-th item (0 shape, 1 dtype, 2 weak) of the first result's aval of a cache entry. */
#define ENTRY_AVAL(entry, k) PyTuple_GetItem((entry), 2 + (k))

#define SET_REF(field, value)   \
  do {                          \
    PyObject *old_ = (PyObject *)(field); \
    (field) = (value);          \
    Py_XDECREF(old_);           \
  } while (0)

/* Configuration states (kiln._src.config): each distinct set of option values has an id; eager
 * mode keeps its executables per state. The process-wide state is set by config_changed; a thread
 * inside a config context manager has its own (thread_config), which C asks Python for again
 * after a process-wide change (state_epoch) since the thread's values are the new ones under its
 * overrides. */
static long state_global;                   /* the process-wide state's id */
static unsigned long state_epoch;           /* bumped by every config_changed */
static _Thread_local long state_thread = -1; /* this thread's state id while it has overrides */
static _Thread_local unsigned long state_thread_epoch;
static PyObject *state_refresh;             /* dispatch._thread_state(): calls thread_config */
static PyObject *exe_caches;                /* state id -> the exe cache of that state */

/* This thread's configuration state id. */
static long current_state(void) {
  if (state_thread < 0) return state_global;
  if (state_thread_epoch != state_epoch && state_refresh) {
    state_thread_epoch = state_epoch;
    PyObject *r = PyObject_CallNoArgs(state_refresh);
    if (r)
      Py_DECREF(r);
    else
      PyErr_WriteUnraisable(state_refresh);
  }
  return state_thread < 0 ? state_global : state_thread;
}

/* The exe cache of state `id` (new reference), made when missing (a bounded number are kept). */
static PyObject *state_cache(long id) {
  if (!exe_caches && !(exe_caches = PyDict_New())) return NULL;
  PyObject *key = PyLong_FromLong(id);
  if (!key) return NULL;
  PyObject *cache = PyDict_GetItemWithError(exe_caches, key);
  if (cache || PyErr_Occurred()) {
    Py_DECREF(key);
    return cache ? Py_NewRef(cache) : NULL;
  }
  if (PyDict_Size(exe_caches) >= 16) PyDict_Clear(exe_caches); /* (a bound on states kept) */
  if ((cache = PyDict_New()) && PyDict_SetItem(exe_caches, key, cache)) Py_CLEAR(cache);
  Py_DECREF(key);
  return cache;
}

/* The eager executables of this thread's configuration state (new reference). */
static PyObject *thread_exe_cache(void) {
  long id = current_state();
  return id == state_global ? Py_NewRef(exe_cache) : state_cache(id);
}

/* ---- the pending arrays, listed (not owned) so that all can be computed at once ---- */

static ArrayObject *pending_head;

static void list_add(ArrayObject *a) {
  a->prev = NULL;
  a->next = pending_head;
  if (pending_head) pending_head->prev = a;
  pending_head = a;
}

static void list_remove(ArrayObject *a) {
  if (!a->prev && pending_head != a) return; /* not listed */
  if (a->prev) a->prev->next = a->next;
  else pending_head = a->next;
  if (a->next) a->next->prev = a->prev;
  a->prev = a->next = NULL;
}

/* ---- fields and lifetime ---- */

static PyMemberDef array_members[] = {
    {"shape", T_OBJECT, offsetof(ArrayObject, shape), 0, "tuple of dimensions"},
    {"dtype", T_OBJECT, offsetof(ArrayObject, dtype), 0, "NumPy dtype of the elements"},
    {"weak_type", T_OBJECT, offsetof(ArrayObject, weak), 0, "whether the dtype is weak (from a Python scalar)"},
    {"_np", T_OBJECT, offsetof(ArrayObject, np), 0, "cached host view, or None"},
    {NULL, 0, 0, 0, NULL}};

static int array_traverse(PyObject *self, visitproc visit, void *arg) {
  ArrayObject *a = (ArrayObject *)self;
  Py_VISIT(Py_TYPE(self));
  Py_VISIT(a->buf);
  Py_VISIT(a->shape);
  Py_VISIT(a->dtype);
  Py_VISIT(a->weak);
  Py_VISIT(a->np);
  Py_VISIT((PyObject *)a->pl);
  Py_VISIT((PyObject *)a->pr);
  return 0;
}

static int array_clear(PyObject *self) {
  ArrayObject *a = (ArrayObject *)self;
  list_remove(a);
  Py_CLEAR(a->buf);
  Py_CLEAR(a->shape);
  Py_CLEAR(a->dtype);
  Py_CLEAR(a->weak);
  Py_CLEAR(a->np);
  Py_CLEAR(a->pl);
  Py_CLEAR(a->pr);
  return 0;
}

static int materialize(ArrayObject *a);
static int deferred_off; /* set at interpreter exit: pending results are dropped, not launched */

/* Whether a's pending chain can still be computed: the garbage collector clears the arrays of a
 * collected cycle (array_clear) before it deallocates them, so a chain may reach an array whose
 * fields are gone (numpyro's samplers left such cycles; computing them segfaulted). */
static int chain_intact(ArrayObject *a, int depth) {
  if (!a || depth > 64 || !a->shape || !a->dtype || !a->weak) return 0; /* (chains hold at most 16 nodes) */
  if (!a->pl) return a->buf != NULL || Py_TYPE((PyObject *)a) != array_type;
  return chain_intact(a->pl, depth + 1) && (!a->pr || chain_intact(a->pr, depth + 1));
}

static void array_dealloc(PyObject *self) {
  PyObject_GC_UnTrack(self);
  ArrayObject *a = (ArrayObject *)self;
  list_remove(a);
  if (a->pl && !a->consumed && !deferred_off && chain_intact(a, 0)) {
    /* A result nobody read: its work was asked for, so it runs now (one fused launch). */
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    if (materialize(a)) PyErr_Clear();
    PyErr_Restore(t, v, tb);
  }
  array_clear(self);
  PyTypeObject *tp = Py_TYPE(self);
  freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
  f(self);
  Py_DECREF(tp);
}

/* The buffer protocol: the Python subclass provides _value() (a read-only NumPy view that waits
 * for the data); the exported buffer is that array's, which the view keeps alive. */
static int array_getbuffer(PyObject *self, Py_buffer *view, int flags) {
  PyObject *v = PyObject_CallMethod(self, "_value", NULL);
  if (!v) return -1;
  int rc = PyObject_GetBuffer(v, view, flags);
  Py_DECREF(v);
  return rc;
}

/* ---- the eager fast path ---- */

/* The kind ('f', 'i', 'u', or 0 for anything else) and size of a dtype, cached by identity
 * (NumPy's builtin dtypes are singletons; others just miss the cache). */
static struct {
  PyObject *dtype;
  char kind;
  int itemsize;
  PyObject *id; /* a small int standing for the dtype in cache keys (cheaper to hash) */
} kinds[16];

static char dtype_kind(PyObject *dtype, int *itemsize) {
  for (int i = 0; i < 16 && kinds[i].dtype; i++)
    if (kinds[i].dtype == dtype) {
      *itemsize = kinds[i].itemsize;
      return kinds[i].kind;
    }
  PyObject *k = PyObject_GetAttrString(dtype, "kind");
  PyObject *s = k ? PyObject_GetAttrString(dtype, "itemsize") : NULL;
  char kind = 0;
  long size = s ? PyLong_AsLong(s) : -1;
  const char *ks = k ? PyUnicode_AsUTF8AndSize(k, NULL) : NULL;
  if (ks && (ks[0] == 'f' || ks[0] == 'i' || ks[0] == 'u') && size > 0) kind = ks[0];
  Py_XDECREF(k);
  Py_XDECREF(s);
  PyErr_Clear();
  for (int i = 0; i < 16; i++)
    if (!kinds[i].dtype) {
      Py_INCREF(dtype);
      kinds[i].dtype = dtype;
      kinds[i].kind = kind;
      kinds[i].itemsize = (int)size;
      kinds[i].id = PyLong_FromLong(i);
      break;
    }
  *itemsize = (int)size;
  return kind;
}

/* What stands for `dtype` in an executable cache key (borrowed): its small-int id, or the dtype
 * itself when the memo is full (or the id could not be made). */
static PyObject *dtype_key(PyObject *dtype) {
  int itemsize;
  dtype_kind(dtype, &itemsize);
  for (int i = 0; i < 16 && kinds[i].dtype; i++)
    if (kinds[i].dtype == dtype) return kinds[i].id ? kinds[i].id : dtype;
  return dtype;
}

/* A Python int or float as the 0-d array it becomes next to an array of `dtype` (kind `kind`),
 * or NULL without an error when the scalar would change the result's dtype (the slow road
 * decides then). The value is converted as kiln.numpy does: to float for float arrays. */
static PyObject *scalar_operand(PyObject *v, ArrayObject *like, char kind, int itemsize) {
  PyObject *value;
  if (PyFloat_CheckExact(v)) {
    if (kind != 'f') return NULL;
    value = Py_NewRef(v);
  } else if (PyLong_CheckExact(v)) {
    int overflow = 0;
    long long n = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || (n == -1 && PyErr_Occurred())) {
      PyErr_Clear();
      return NULL;
    }
    if (kind == 'f') {
      if (n >= (1LL << 53) || n <= -(1LL << 53)) return NULL;
      value = PyFloat_FromDouble((double)n);
      if (!value) return NULL;
    } else {
      int bits = itemsize * 8;
      long long lo = kind == 'u' ? 0 : (bits >= 64 ? LLONG_MIN : -(1LL << (bits - 1)));
      long long hi = bits >= 64 ? LLONG_MAX : (kind == 'u' ? (1LL << bits) - 1 : (1LL << (bits - 1)) - 1);
      /* beyond int32 the slow road decides: JAX converts a Python int to the default int first, so
       * uint32 + (2**32 - 1) raises OverflowError unless x64 is on */
      if (n < lo || n > hi || n < INT32_MIN || n > INT32_MAX) return NULL;
      value = Py_NewRef(v);
    }
  } else
    return NULL;
  /* -0.0 == 0.0 and hashes alike: a negative zero goes past the cache (x * -0.0 is not x * 0.0) */
  int negzero = PyFloat_CheckExact(value) && PyFloat_AsDouble(value) == 0.0 && signbit(PyFloat_AsDouble(value));
  PyObject *key = negzero ? NULL : PyTuple_Pack(4, (PyObject *)Py_TYPE(value), value, like->dtype, like->weak);
  PyObject *arr = key ? PyDict_GetItemWithError(scalar_cache, key) : NULL;
  Py_XINCREF(arr);
  Py_XDECREF(key);
  if (!arr && !PyErr_Occurred()) arr = PyObject_CallFunctionObjArgs(scalar_fn, value, like->dtype, like->weak, NULL);
  Py_DECREF(value);
  return arr;
}

/* A new kiln.Array of the given aval around Buffer `buf` (reference stolen). */
static PyObject *array_new(PyObject *buf, PyObject *shape, PyObject *dtype, PyObject *weak) {
  allocfunc alloc = (allocfunc)PyType_GetSlot(array_type, Py_tp_alloc);
  ArrayObject *a = (ArrayObject *)alloc(array_type, 0);
  if (!a) {
    Py_DECREF(buf);
    return NULL;
  }
  a->buf = buf;
  a->shape = Py_NewRef(shape);
  a->dtype = Py_NewRef(dtype);
  a->weak = Py_NewRef(weak);
  a->np = NULL;
  return (PyObject *)a;
}

/* Runs executable `exe` on the Buffers bufs[0..n-1]; fills outs (one reference each). Inputs on
 * another device go through the Executable's Python call, which moves them over. */
static int run_exe(PyObject *exe, PyObject *const *bufs, int n, kl_buffer **outs) {
  if (!PyObject_TypeCheck(exe, (PyTypeObject *)ExecType)) {
    PyErr_SetString(PyExc_SystemError, "internal: not an Executable");
    return -1;
  }
  ExecObject *e = (ExecObject *)exe;
  if (e->ninputs != n) {
    PyErr_Format(PyExc_SystemError, "internal: executable expects %d buffers, got %d", e->ninputs, n);
    return -1;
  }
  kl_buffer *small[16];
  kl_buffer **ins = n <= 16 ? small : PyMem_Malloc(sizeof(kl_buffer *) * (size_t)n);
  if (!ins) {
    PyErr_NoMemory();
    return -1;
  }
  int same_device = 1;
  for (int i = 0; i < n; i++) {
    ins[i] = ((BufferObject *)bufs[i])->buf;
    same_device &= ins[i]->device == e->x->device;
  }
  int rc = 0;
  if (same_device) {
    char err[512];
    if ((rc = kl_exec_launch(e->x, ins, outs, err, sizeof err)))
      kl_py_raise(NULL, err);
    else
      rc = kl_py_wait_callbacks(e->x, outs, e->noutputs);
  } else {
    PyObject *args = PyTuple_New(n);
    for (int i = 0; args && i < n; i++) PyTuple_SetItem(args, i, Py_NewRef(bufs[i]));
    PyObject *res = args ? PyObject_Call(exe, args, NULL) : NULL;
    Py_XDECREF(args);
    rc = res ? 0 : -1;
    for (int i = 0; res && i < e->noutputs; i++) {
      outs[i] = ((BufferObject *)PyTuple_GetItem(res, i))->buf;
      kl_buf_retain(outs[i]);
    }
    Py_XDECREF(res);
  }
  if (ins != small) PyMem_Free(ins);
  return rc;
}

/* An out-of-memory error of primitive `prim` (a str) names it and its results' shapes, as bind
 * always did: from `avals` (a cache entry's) when given, else from `shape`. */
static void name_memory_error(PyObject *prim, PyObject *avals, PyObject *shape) {
  if (!PyErr_ExceptionMatches(PyExc_MemoryError)) return;
  PyObject *t, *v, *tb;
  PyErr_Fetch(&t, &v, &tb);
  PyObject *msg = v ? PyObject_Str(v) : NULL, *shapes = NULL;
  if (avals) {
    PyObject *parts = PyList_New(0), *sep = PyUnicode_FromString(", ");
    for (Py_ssize_t i = 0; parts && i < PyTuple_Size(avals); i++) {
      PyObject *s = PyObject_Str(PyTuple_GetItem(PyTuple_GetItem(avals, i), 0));
      if (!s || PyList_Append(parts, s)) Py_CLEAR(parts);
      Py_XDECREF(s);
    }
    shapes = parts && sep ? PyUnicode_Join(sep, parts) : NULL;
    Py_XDECREF(parts);
    Py_XDECREF(sep);
  } else
    shapes = PyObject_Repr(shape);
  if (msg && shapes) {
    PyErr_Format(PyExc_MemoryError, "%U: cannot allocate the result (shape %U): %U", prim, shapes, msg);
    Py_XDECREF(t);
    Py_XDECREF(v);
    Py_XDECREF(tb);
  } else {
    PyErr_Clear();
    PyErr_Restore(t, v, tb);
  }
  Py_XDECREF(msg);
  Py_XDECREF(shapes);
}

/* Launches the cached executable `entry` = (exe, shape, dtype, weak) on x1 (and x2 unless NULL). */
static PyObject *launch(int op, PyObject *entry, ArrayObject *x1, ArrayObject *x2) {
  PyObject *bufs[2] = {x1->buf, x2 ? x2->buf : NULL};
  kl_buffer *out;
  if (run_exe(PyTuple_GetItem(entry, 0), bufs, x2 ? 2 : 1, &out)) {
    name_memory_error(op_name[op], PyTuple_GetItem(entry, 1), NULL);
    return NULL;
  }
  PyObject *buf = buffer_new_from(out);
  if (!buf) return NULL;
  return array_new(buf, ENTRY_AVAL(entry, 0), ENTRY_AVAL(entry, 1), ENTRY_AVAL(entry, 2));
}

/* ---- pending results: eager fusion ----
 * An operation of the fast path whose operands are pending does not launch: its result is
 * pending too, and the chain runs as one fused kernel when its value is first needed (a read,
 * another operation, a jit call) or when it is dropped unread. `x * 2 + 1` is one launch. */

#define FUSE_MAX_NODES 16

/* a->buf = buf, dropping a buffer another thread may have set meanwhile */
#define SET_BUF(a, b)     \
  do {                           \
    PyObject *old_ = (a)->buf;   \
    (a)->buf = (b);              \
    Py_XDECREF(old_);            \
  } while (0)

typedef struct {
  ArrayObject *leaf[2 * FUSE_MAX_NODES], *node[FUSE_MAX_NODES];
  int nleaves, nnodes;
} chain;

/* Post-order walk: computed operands become leaves (once each), pending ones nodes. Returns the
 * reference of `a` in the key: a leaf index i >= 0, or -(node index + 1). */
static int walk(chain *c, ArrayObject *a) {
  if (!a->pl) {
    for (int i = 0; i < c->nleaves; i++)
      if (c->leaf[i]->buf == a->buf) return i;
    c->leaf[c->nleaves] = a;
    return c->nleaves++;
  }
  for (int j = 0; j < c->nnodes; j++)
    if (c->node[j] == a) return -(j + 1);
  walk(c, a->pl);
  if (a->pr) walk(c, a->pr);
  c->node[c->nnodes] = a;
  return -(c->nnodes++ + 1);
}

static PyObject *ref_of(chain *c, ArrayObject *a) {
  if (!a) Py_RETURN_NONE; /* the second operand of a unary operation */
  for (int i = 0; i < c->nleaves; i++)
    if (c->leaf[i] == a || (!a->pl && c->leaf[i]->buf == a->buf)) return PyLong_FromLong(i);
  for (int j = 0; j < c->nnodes; j++)
    if (c->node[j] == a) return PyLong_FromLong(-(j + 1));
  return PyLong_FromLong(0); /* unreachable */
}

/* Computes a pending array: one launch of the cached executable of its chain. */
static void chain_release(chain *c) {
  for (int i = 0; i < c->nleaves; i++) Py_DECREF((PyObject *)c->leaf[i]);
  for (int j = 0; j < c->nnodes - 1; j++) Py_DECREF((PyObject *)c->node[j]);
}

/* A subclass whose buffer is made on first use (a sharded Array's gathered value: class attribute
 * _lazy true, its _buf a Python property) gets it made before C reads a->buf. */
static int fill_lazy(ArrayObject *a) {
  if (a->buf || Py_TYPE((PyObject *)a) == array_type) return 0;
  PyObject *lz = PyObject_GetAttrString((PyObject *)Py_TYPE((PyObject *)a), "_lazy");
  if (!lz) {
    PyErr_Clear();
    return 0;
  }
  int on = PyObject_IsTrue(lz);
  Py_DECREF(lz);
  if (on <= 0) return on;
  PyObject *b = PyObject_GetAttrString((PyObject *)a, "_buf");
  Py_XDECREF(b);
  return b ? 0 : -1;
}

static int materialize(ArrayObject *a) {
  if (!a->pl) return fill_lazy(a);
  chain c;
  c.nleaves = c.nnodes = 0;
  walk(&c, a);
  /* Hold the chain while Python may run (compiling; another thread may compute part of it and
   * drop its operands). Not the root itself: it may be in its deallocation. */
  for (int i = 0; i < c.nleaves; i++) Py_INCREF((PyObject *)c.leaf[i]);
  for (int j = 0; j < c.nnodes - 1; j++) Py_INCREF((PyObject *)c.node[j]);
  int rc = -1;
  /* key: (nleaves, (shape, dtype, weak) per leaf..., (op, ref1, ref2) per node...) */
  PyObject *key = PyTuple_New(1 + 3 * c.nleaves + 3 * c.nnodes);
  if (!key) goto out;
  PyTuple_SetItem(key, 0, PyLong_FromLong(c.nleaves));
  for (int i = 0; i < c.nleaves; i++) {
    PyTuple_SetItem(key, 1 + 3 * i, Py_NewRef(c.leaf[i]->shape));
    PyTuple_SetItem(key, 2 + 3 * i, Py_NewRef(c.leaf[i]->dtype));
    PyTuple_SetItem(key, 3 + 3 * i, Py_NewRef(c.leaf[i]->weak));
  }
  for (int j = 0; j < c.nnodes; j++) {
    int at = 1 + 3 * c.nleaves + 3 * j;
    PyTuple_SetItem(key, at, PyLong_FromLong(c.node[j]->op));
    PyTuple_SetItem(key, at + 1, ref_of(&c, c.node[j]->pl));
    PyTuple_SetItem(key, at + 2, ref_of(&c, c.node[j]->pr));
  }
  PyObject *cache = thread_exe_cache();
  PyObject *exe = cache ? PyDict_GetItemWithError(cache, key) : NULL;
  if (exe)
    Py_INCREF(exe);
  else if (!PyErr_Occurred()) {
    exe = PyObject_CallFunctionObjArgs(fused_fn, key, NULL);
    if (exe && PyDict_SetItem(cache, key, exe)) Py_CLEAR(exe);
  }
  Py_XDECREF(cache);
  Py_DECREF(key);
  if (!exe) goto out;
  if (!a->pl) { /* another thread computed it meanwhile */
    Py_DECREF(exe);
    rc = 0;
    goto out;
  }
  PyObject *bufs[2 * FUSE_MAX_NODES];
  for (int i = 0; i < c.nleaves; i++) bufs[i] = c.leaf[i]->buf;
  kl_buffer *out;
  int lrc = run_exe(exe, bufs, c.nleaves, &out);
  Py_DECREF(exe);
  if (lrc) {
    name_memory_error(op_name[a->op], NULL, a->shape);
    goto out;
  }
  PyObject *buf = buffer_new_from(out);
  if (!buf) goto out;
  SET_BUF(a, buf);
  n_chains++;
  n_chain_ops += c.nnodes;
  list_remove(a);
  Py_CLEAR(a->pl); /* the chain's operands are no longer needed by this array */
  Py_CLEAR(a->pr);
  rc = 0;
out:
  chain_release(&c);
  return rc;
}

/* JAX's error for a deleted (or donated) array: "Array has been deleted with shape=float32[2,3]." */
static PyObject *deleted_error(ArrayObject *a) {
  PyObject *name = a->dtype ? PyObject_GetAttrString(a->dtype, "name") : NULL;
  PyObject *comma = PyUnicode_FromString(",");
  PyObject *parts = a->shape ? PySequence_List(a->shape) : PyList_New(0);
  for (Py_ssize_t i = 0; parts && i < PyList_Size(parts); i++) {
    PyObject *t = PyObject_Str(PyList_GetItem(parts, i));
    if (!t || PyList_SetItem(parts, i, t)) break;
  }
  PyObject *joined = parts && comma && !PyErr_Occurred() ? PyUnicode_Join(comma, parts) : NULL;
  if (name && joined)
    PyErr_Format(PyExc_RuntimeError, "Array has been deleted with shape=%U[%U].", name, joined);
  else {
    PyErr_Clear();
    PyErr_SetString(PyExc_RuntimeError, "Array has been deleted.");
  }
  Py_XDECREF(name);
  Py_XDECREF(comma);
  Py_XDECREF(parts);
  Py_XDECREF(joined);
  return NULL;
}

/* kiln.Array._buf: the Buffer (computing a pending array first), or None for a Tracer; a
 * deleted array raises JAX's error. */
static PyObject *array_get_buf(PyObject *self, void *unused) {
  (void)unused;
  ArrayObject *a = (ArrayObject *)self;
  if (a->pl && materialize(a)) return NULL;
  if (a->buf && a->buf == deleted) return deleted_error(a);
  return Py_NewRef(a->buf ? a->buf : Py_None);
}

/* donate_call(exe, bufs, donated): runs exe on bufs (a tuple of Buffers, None at each donated
 * position) like calling it, where donated is ((input index, Array), ...): each donated Array's
 * buffer is the input at its index and, when exe's donor table gives it an output and nothing
 * but that Array holds it, the output is written into it; every donated Array is deleted
 * afterwards. Returns the outputs as Buffers. */
static PyObject *array_delete(PyObject *self, PyObject *o);
static PyObject *donate_call(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *exe, *bufs, *donated;
  if (!PyArg_ParseTuple(args, "OOO", &exe, &bufs, &donated)) return NULL;
  if (!PyObject_TypeCheck(exe, (PyTypeObject *)ExecType) || !PyTuple_Check(bufs) || !PyTuple_Check(donated))
    return PyErr_Format(PyExc_TypeError, "donate_call(exe, bufs, donated): bad arguments");
  ExecObject *e = (ExecObject *)exe;
  Py_ssize_t n = PyTuple_Size(bufs), nd = PyTuple_Size(donated);
  if (n != e->ninputs) return PyErr_Format(PyExc_SystemError, "internal: executable expects %d buffers, got %zd", e->ninputs, n);
  kl_buffer **ins = PyMem_Calloc((size_t)n + 1, sizeof *ins), **outs = PyMem_Calloc((size_t)e->noutputs + 1, sizeof *outs);
  kl_buffer **preset = PyMem_Calloc((size_t)e->noutputs + 1, sizeof *preset);
  PyObject *res = NULL;
  if (!ins || !outs || !preset) {
    PyErr_NoMemory();
    goto done;
  }
  if (kl_py_eager_flush()) goto done; /* deferred work reading a donated array runs before it is written */
  for (Py_ssize_t k = 0; k < nd; k++) { /* the donated arrays' buffers, computed */
    PyObject *pair = PyTuple_GetItem(donated, k);
    Py_ssize_t i = PyLong_AsSsize_t(PyTuple_GetItem(pair, 0));
    ArrayObject *a = (ArrayObject *)PyTuple_GetItem(pair, 1);
    if (i < 0 || i >= n || !PyObject_TypeCheck((PyObject *)a, array_type)) {
      PyErr_SetString(PyExc_SystemError, "internal: bad donated argument");
      goto done;
    }
    if (materialize(a)) goto done;
    if (a->buf && a->buf == deleted) {
      deleted_error(a);
      goto done;
    }
    if (!a->buf || !PyObject_TypeCheck(a->buf, (PyTypeObject *)BufferType)) {
      PyErr_SetString(PyExc_SystemError, "internal: a donated array without a buffer");
      goto done;
    }
    ins[i] = ((BufferObject *)a->buf)->buf;
    /* nothing else can see it: one Buffer handle, held by this Array alone (launches in flight
     * hold references too, harmlessly: the queue runs them first) */
    int sole = Py_REFCNT(a->buf) == 1 && atomic_load((_Atomic int *)&ins[i]->holders) == 1 && !ins[i]->shared &&
               !ins[i]->release && ins[i]->device == e->x->device;
    for (int j = 0; j < e->noutputs; j++) sole &= preset[j] != ins[i]; /* one array donated twice: once */
    for (int j = 0; sole && e->x->donor && j < e->noutputs; j++)
      if (e->x->donor[j] == i && !preset[j] && ins[i]->nbytes == e->x->slot_bytes[e->x->out_slots[j]]) {
        preset[j] = ins[i];
        break;
      }
  }
  int same_device = 1;
  for (Py_ssize_t i = 0; i < n; i++) {
    if (!ins[i]) {
      PyObject *b = PyTuple_GetItem(bufs, i);
      if (!PyObject_TypeCheck(b, (PyTypeObject *)BufferType)) {
        PyErr_Format(PyExc_TypeError, "executable argument %zd is not a Buffer", i);
        goto done;
      }
      ins[i] = ((BufferObject *)b)->buf;
    }
    same_device &= ins[i]->device == e->x->device;
  }
  if (!same_device) { /* arrays to bring over: the plain call (no buffer reused), then the deletions */
    PyObject *plain = PyTuple_New(n);
    for (Py_ssize_t i = 0; plain && i < n; i++) PyTuple_SetItem(plain, i, Py_NewRef(PyTuple_GetItem(bufs, i)));
    for (Py_ssize_t k = 0; plain && k < nd; k++) { /* each donated position: its array's buffer */
      PyObject *pair = PyTuple_GetItem(donated, k);
      Py_ssize_t i = PyLong_AsSsize_t(PyTuple_GetItem(pair, 0));
      PyTuple_SetItem(plain, i, Py_NewRef(((ArrayObject *)PyTuple_GetItem(pair, 1))->buf));
    }
    res = plain ? PyObject_Call(exe, plain, NULL) : NULL;
    Py_XDECREF(plain);
  } else {
    char err[512];
    if (kl_exec_launch_into(e->x, ins, preset, outs, err, sizeof err)) {
      kl_py_raise(NULL, err);
      goto done;
    }
    if (kl_py_wait_callbacks(e->x, outs, e->noutputs)) goto done;
    res = PyTuple_New(e->noutputs);
    for (int j = 0; j < e->noutputs; j++) {
      PyObject *b = buffer_new_from(outs[j]);
      if (res) PyTuple_SetItem(res, j, b);
      else Py_XDECREF(b);
    }
  }
  for (Py_ssize_t k = 0; res && k < nd; k++) { /* donated: deleted, whether or not reused */
    PyObject *r = array_delete(NULL, PyTuple_GetItem(PyTuple_GetItem(donated, k), 1));
    if (!r) Py_CLEAR(res);
    Py_XDECREF(r);
  }
done:
  PyMem_Free(ins);
  PyMem_Free(outs);
  PyMem_Free(preset);
  return res;
}

/* array_delete(a): drops a's buffer (its memory goes once no queued work reads it); using a
 * afterwards raises. Deleting twice is allowed, as in JAX. */
static PyObject *array_delete(PyObject *self, PyObject *o) {
  (void)self;
  if (!array_type || !PyObject_TypeCheck(o, array_type))
    return PyErr_Format(PyExc_TypeError, "array_delete: not a kiln Array");
  ArrayObject *a = (ArrayObject *)o;
  if (!deleted && !(deleted = PyObject_CallNoArgs((PyObject *)&PyBaseObject_Type))) return NULL;
  if (kl_py_eager_flush()) return NULL; /* pending results reading a are launched first (they keep its buffer) */
  PyObject *old = a->buf;
  a->buf = Py_NewRef(deleted);
  Py_XDECREF(old);
  list_remove(a);
  Py_CLEAR(a->pl);
  Py_CLEAR(a->pr);
  Py_RETURN_NONE;
}

static PyObject *array_is_deleted(PyObject *self, PyObject *o) {
  (void)self;
  if (!array_type || !PyObject_TypeCheck(o, array_type))
    return PyErr_Format(PyExc_TypeError, "array_is_deleted: not a kiln Array");
  return PyBool_FromLong(deleted && ((ArrayObject *)o)->buf == deleted);
}

static int array_set_buf(PyObject *self, PyObject *value, void *unused) {
  (void)unused;
  ArrayObject *a = (ArrayObject *)self;
  PyObject *old = a->buf;
  a->buf = value == Py_None ? NULL : Py_XNewRef(value);
  Py_XDECREF(old);
  list_remove(a);
  Py_CLEAR(a->pl);
  Py_CLEAR(a->pr);
  return 0;
}

static PyGetSetDef array_getset[] = {
    {"_buf", array_get_buf, array_set_buf, "the Buffer holding the data (computed on first use)", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

/* kiln.Array exactly (not a Tracer), computed or pending. */
static int is_kiln_array(PyObject *o) {
  if (Py_TYPE(o) != array_type) return 0;
  ArrayObject *a = (ArrayObject *)o;
  return a->pl || (a->buf && PyObject_TypeCheck(a->buf, (PyTypeObject *)BufferType));
}

/* A pending array for `op` on x1 (and x2 unless NULL) with the result aval of `entry`. */
static PyObject *pending_new(int op, PyObject *entry, ArrayObject *x1, ArrayObject *x2) {
  int nodes = 1 + (x1->pl ? x1->nodes : 0) + (x2 && x2->pl ? x2->nodes : 0);
  if (nodes > FUSE_MAX_NODES) { /* a long chain: compute the operands, start a new one */
    if (materialize(x1) || (x2 && materialize(x2))) return NULL;
    nodes = 1;
  }
  allocfunc alloc = (allocfunc)PyType_GetSlot(array_type, Py_tp_alloc);
  ArrayObject *a = (ArrayObject *)alloc(array_type, 0);
  if (!a) return NULL;
  a->shape = Py_NewRef(ENTRY_AVAL(entry, 0));
  a->dtype = Py_NewRef(ENTRY_AVAL(entry, 1));
  a->weak = Py_NewRef(ENTRY_AVAL(entry, 2));
  a->pl = (ArrayObject *)Py_NewRef((PyObject *)x1);
  a->pr = x2 ? (ArrayObject *)Py_NewRef((PyObject *)x2) : NULL;
  a->op = op;
  a->nodes = nodes;
  list_add(a);
  x1->consumed |= x1->pl != NULL;
  if (x2) x2->consumed |= x2->pl != NULL;
  return (PyObject *)a;
}

/* The cache entry for primitive `prim` with params `params` (None or a dict) on the kiln arrays
 * xs[0..n-1], looked up by `key` (exe_cache's form, see there); new reference. Misses, and
 * entries without exe when need_exe, ask dispatch._eager_entry. */
static PyObject *entry_lookup(PyObject *key, PyObject *prim, PyObject *params, PyObject *const *xs, Py_ssize_t n,
                              int need_exe) {
  PyObject *cache = thread_exe_cache();
  if (!cache) return NULL;
  PyObject *entry = PyDict_GetItemWithError(cache, key);
  if (entry && (!need_exe || PyTuple_GetItem(entry, 0) != Py_None)) {
    Py_DECREF(cache);
    return Py_NewRef(entry);
  }
  if (PyErr_Occurred()) {
    Py_DECREF(cache);
    return NULL;
  }
  PyObject *list = PyList_New(n);
  for (Py_ssize_t i = 0; list && i < n; i++) PyList_SetItem(list, i, Py_NewRef(xs[i]));
  entry = list ? PyObject_CallFunctionObjArgs(entry_fn, prim, params, list, need_exe ? Py_True : Py_False, NULL) : NULL;
  Py_XDECREF(list);
  if (entry && (!PyTuple_Check(entry) || PyTuple_Size(entry) != 2 || !PyTuple_Check(PyTuple_GetItem(entry, 1)) ||
                PyTuple_Size(PyTuple_GetItem(entry, 1)) < 1)) {
    PyErr_SetString(PyExc_SystemError, "internal: _eager_entry must return (exe or None, avals)");
    Py_CLEAR(entry);
  }
  if (entry) { /* the first result's aval, flattened for the fast path */
    PyObject *av = PyTuple_GetItem(PyTuple_GetItem(entry, 1), 0), *full = NULL;
    if (PyTuple_Check(av) && PyTuple_Size(av) == 3)
      full = PyTuple_Pack(5, PyTuple_GetItem(entry, 0), PyTuple_GetItem(entry, 1), PyTuple_GetItem(av, 0),
                          PyTuple_GetItem(av, 1), PyTuple_GetItem(av, 2));
    else
      PyErr_SetString(PyExc_SystemError, "internal: _eager_entry must return (exe or None, avals)");
    Py_DECREF(entry);
    entry = full;
  }
  if (entry && PyDict_SetItem(cache, key, entry)) Py_CLEAR(entry);
  Py_DECREF(cache);
  return entry;
}

/* The cache entry of fast-path operation `op` on x1 (and x2 unless NULL); new reference. exe is
 * None until an entry is launched by itself (need_exe): fused operations need the aval only. */
static PyObject *entry_for(int op, ArrayObject *x1, ArrayObject *x2, int need_exe) {
  PyObject *d1 = dtype_key(x1->dtype);
  PyObject *key = x2 ? PyTuple_Pack(7, op_name[op], x1->shape, d1, x1->weak, x2->shape,
                                    x2->dtype == x1->dtype ? d1 : dtype_key(x2->dtype), x2->weak)
                     : PyTuple_Pack(4, op_name[op], x1->shape, d1, x1->weak);
  if (!key) return NULL;
  PyObject *xs[2] = {(PyObject *)x1, (PyObject *)x2};
  PyObject *entry = entry_lookup(key, op_name[op], Py_None, xs, x2 ? 2 : 1, need_exe);
  Py_DECREF(key);
  return entry;
}

/* The params part of a cache key: () for none, else ((name, value), ...) in the dict's order,
 * lists made tuples, bodies by their structure (kl_py_body_key). New reference. */
static PyObject *params_key(PyObject *params) {
  if (params == Py_None || !PyDict_Check(params) || PyDict_Size(params) == 0) {
    if (params != Py_None && !PyDict_Check(params)) {
      PyErr_SetString(PyExc_TypeError, "bind: params must be a dict or None");
      return NULL;
    }
    return Py_NewRef(no_params);
  }
  PyObject *key = PyTuple_New(PyDict_Size(params));
  PyObject *k, *v;
  Py_ssize_t pos = 0, i = 0;
  while (key && PyDict_Next(params, &pos, &k, &v)) {
    PyObject *val = PyList_Check(v) ? PyList_AsTuple(v) : kl_py_body_key(v);
    if (!val && !PyErr_Occurred()) val = Py_NewRef(v);
    PyObject *item = val ? PyTuple_Pack(2, k, val) : NULL;
    Py_XDECREF(val);
    if (!item) Py_CLEAR(key);
    else PyTuple_SetItem(key, i++, item);
  }
  return key;
}

/* kiln.Array or a subclass of it that is no Tracer (a sharded Array: its buffer holds the whole). */
int kl_py_is_array(PyObject *o) {
  return array_type && (Py_TYPE(o) == array_type || (PyObject_TypeCheck(o, array_type) && !kl_py_is_tracer(o)));
}

PyObject *kl_py_eager_bind(PyObject *prim, PyObject *const *xs, Py_ssize_t n, PyObject *params) {
  if (!entry_fn) return PyErr_Format(PyExc_SystemError, "internal: eager bind before eager_setup");
  PyObject *pk = params_key(params);
  if (!pk) return NULL;
  int np = pk != no_params; /* the params key is left out when empty (the fast path's keys) */
  PyObject *key = PyTuple_New(1 + np + 3 * n);
  if (!key) {
    Py_DECREF(pk);
    return NULL;
  }
  PyTuple_SetItem(key, 0, Py_NewRef(prim));
  if (np) PyTuple_SetItem(key, 1, pk);
  else Py_DECREF(pk);
  for (Py_ssize_t i = 0; i < n; i++) {
    ArrayObject *x = (ArrayObject *)xs[i];
    PyTuple_SetItem(key, 1 + np + 3 * i, Py_NewRef(x->shape ? x->shape : Py_None));
    PyTuple_SetItem(key, 2 + np + 3 * i, Py_NewRef(x->dtype ? dtype_key(x->dtype) : Py_None));
    PyTuple_SetItem(key, 3 + np + 3 * i, Py_NewRef(x->weak ? x->weak : Py_None));
  }
  PyObject *entry = entry_lookup(key, prim, params, xs, n, 1);
  Py_DECREF(key);
  if (!entry) return NULL;
  PyObject *exe = PyTuple_GetItem(entry, 0), *avals = PyTuple_GetItem(entry, 1), *res = NULL;
  Py_ssize_t no = PyTuple_Size(avals);
  PyObject *small_bufs[16];
  kl_buffer *small_outs[16];
  PyObject **bufs = n <= 16 ? small_bufs : PyMem_Malloc(sizeof(PyObject *) * (size_t)n);
  kl_buffer **outs = no <= 16 ? small_outs : PyMem_Malloc(sizeof(kl_buffer *) * (size_t)no);
  if (!bufs || !outs) {
    PyErr_NoMemory();
    goto done;
  }
  for (Py_ssize_t i = 0; i < n; i++) {
    ArrayObject *x = (ArrayObject *)xs[i];
    if (materialize(x)) goto done;
    if (x->buf && x->buf == deleted) {
      deleted_error(x);
      goto done;
    }
    if (!x->buf || !PyObject_TypeCheck(x->buf, (PyTypeObject *)BufferType)) {
      PyErr_Format(PyExc_TypeError, "executable argument %zd is not a Buffer", i);
      goto done;
    }
    bufs[i] = x->buf;
  }
  if (run_exe(exe, bufs, (int)n, outs)) {
    name_memory_error(prim, avals, NULL);
    goto done;
  }
  res = PyTuple_New(no);
  for (Py_ssize_t i = 0; i < no; i++) {
    PyObject *av = PyTuple_GetItem(avals, i);
    PyObject *b = buffer_new_from(outs[i]);
    PyObject *arr = b ? array_new(b, PyTuple_GetItem(av, 0), PyTuple_GetItem(av, 1), PyTuple_GetItem(av, 2)) : NULL;
    if (!arr || !res) {
      Py_XDECREF(arr);
      for (Py_ssize_t k = i + 1; k < no; k++) kl_buf_release(outs[k]);
      Py_CLEAR(res);
      break;
    }
    PyTuple_SetItem(res, i, arr);
  }
done:
  if (bufs != small_bufs) PyMem_Free(bufs);
  if (outs != small_outs) PyMem_Free(outs);
  Py_DECREF(entry);
  if (res && eager_check) { /* debug_nans/infs: a NaN (inf) raises here, naming the primitive */
    PyObject *ok = PyObject_CallFunctionObjArgs(eager_check, prim, res, NULL);
    if (!ok) Py_CLEAR(res);
    Py_XDECREF(ok);
  }
  return res;
}

/* Whether computed array x lives in memory another library can write (imported or exported
 * through DLPack or the CUDA array interface): work reading it runs at once, not deferred. */
static int reads_shared(ArrayObject *x) {
  if (x->pl || !x->buf || !PyObject_TypeCheck(x->buf, (PyTypeObject *)BufferType)) return 0;
  kl_buffer *b = ((BufferObject *)x->buf)->buf;
  return b->shared || b->release;
}

int kl_py_eager_flush(void) {
  while (pending_head) {
    ArrayObject *a = pending_head;
    Py_INCREF((PyObject *)a);
    int rc = materialize(a);
    list_remove(a);
    Py_DECREF((PyObject *)a);
    if (rc) return -1;
  }
  return 0;
}

/* eager_export(buffer): buffer is about to be shared with another library */
static PyObject *eager_export(PyObject *self, PyObject *bo) {
  (void)self;
  if (!PyObject_TypeCheck(bo, (PyTypeObject *)BufferType)) return PyErr_Format(PyExc_TypeError, "eager_export: not a Buffer");
  ((BufferObject *)bo)->buf->shared = 1;
  if (kl_py_eager_flush()) return NULL;
  Py_RETURN_NONE;
}

/* Runs (or, with fusion, defers) op on x1 (and x2 unless NULL). */
static PyObject *apply(int op, ArrayObject *x1, ArrayObject *x2) {
  int defer = fusion && !eager_check && !reads_shared(x1) && !(x2 && reads_shared(x2));
  PyObject *entry = entry_for(op, x1, x2, !defer);
  if (!entry) return NULL;
  PyObject *res = NULL;
  if (defer) res = pending_new(op, entry, x1, x2);
  else if (!materialize(x1) && (!x2 || !materialize(x2))) res = launch(op, entry, x1, x2);
  Py_DECREF(entry);
  if (!res && !PyErr_Occurred()) PyErr_SetString(PyExc_SystemError, "internal: eager fast path failed");
  if (res && eager_check) {
    PyObject *name = PyUnicode_FromString(op_prim[op]);
    PyObject *ok = name ? PyObject_CallFunctionObjArgs(eager_check, name, res, NULL) : NULL;
    Py_XDECREF(name);
    if (!ok) Py_CLEAR(res);
    Py_XDECREF(ok);
  }
  return res;
}

/* Whether the fast path computes `op` on elements of this kind as the slow road would. */
static int op_takes(int op, char kind) {
  if (!kind) return 0;
  if (op == OP_DIV || op >= OP_EXP) return kind == 'f';
  if (op == OP_NEG || op == OP_ABS) return kind != 'u';
  return 1;
}

/* The result of `l op r` by the fast path, or NULL: with an error set when the operation failed,
 * without one when this case belongs to the slow road. Operands: two arrays of one dtype whose
 * shapes are equal or one of them (), or an array and a Python scalar that keeps its dtype. */
static PyObject *eager2(int op, PyObject *l, PyObject *r) {
  if (!array_type || kl_py_tracing()) return NULL; /* under a trace: staged, not run */
  int la = is_kiln_array(l), ra = is_kiln_array(r);
  if (!la && !ra) return NULL;
  ArrayObject *a = (ArrayObject *)(la ? l : r);
  int itemsize;
  char kind = dtype_kind(a->dtype, &itemsize);
  if (!op_takes(op, kind)) return NULL;
  PyObject *x1, *x2;
  if (la && ra) {
    ArrayObject *b = (ArrayObject *)r;
    if (a->dtype != b->dtype) return NULL;
    int same = PyTuple_Size(b->shape) == 0 || PyTuple_Size(a->shape) == 0 ? 1 : PyObject_RichCompareBool(a->shape, b->shape, Py_EQ);
    if (same != 1) {
      if (same < 0) PyErr_Clear();
      return NULL;
    }
    x1 = Py_NewRef(l);
    x2 = Py_NewRef(r);
  } else {
    PyObject *s = scalar_operand(la ? r : l, a, kind, itemsize);
    if (!s) return NULL; /* not a scalar we convert here; any error is the slow road's to raise */
    if (!is_kiln_array(s)) {
      Py_DECREF(s);
      return NULL;
    }
    x1 = la ? Py_NewRef(l) : s;
    x2 = la ? s : Py_NewRef(r);
  }
  PyObject *res = apply(op, (ArrayObject *)x1, (ArrayObject *)x2);
  Py_DECREF(x1);
  Py_DECREF(x2);
  return res;
}

/* eager_apply(code, x, y=None): op `code` (an index of eager_ops()) on kiln arrays by the fast
 * path, or None where it does not apply (the caller takes the slow road). */
static PyObject *eager_apply(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  (void)self;
  if (nargs < 2 || nargs > 3) return PyErr_Format(PyExc_TypeError, "eager_apply: expects (code, x, y=None)");
  int op = (int)PyLong_AsLong(args[0]);
  if (op == -1 && PyErr_Occurred()) return NULL;
  PyObject *x = args[1], *y = nargs == 3 ? args[2] : Py_None;
  if (op < 0 || op >= NOPS) return PyErr_Format(PyExc_ValueError, "eager_apply: no operation %d", op);
  PyObject *res;
  if (op < OP_NEG) {
    if (y == Py_None || !is_kiln_array(x) || !is_kiln_array(y)) Py_RETURN_NONE;
    res = eager2(op, x, y);
  } else {
    if (!array_type || kl_py_tracing() || !is_kiln_array(x)) Py_RETURN_NONE;
    int itemsize;
    res = op_takes(op, dtype_kind(((ArrayObject *)x)->dtype, &itemsize)) ? apply(op, (ArrayObject *)x, NULL) : NULL;
  }
  if (res || PyErr_Occurred()) return res;
  Py_RETURN_NONE;
}

/* set_eager_check(fn or None): fn(prim name, results) runs after every eager operation */
static PyObject *set_eager_check(PyObject *self, PyObject *fn) {
  (void)self;
  PyObject *old = eager_check;
  eager_check = fn == Py_None ? NULL : Py_NewRef(fn);
  Py_XDECREF(old);
  Py_RETURN_NONE;
}

/* eager_ops() -> the fast path's operation names, by code */
static PyObject *eager_ops(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  PyObject *t = PyTuple_New(NOPS);
  for (int i = 0; t && i < NOPS; i++) PyTuple_SetItem(t, i, PyUnicode_FromString(op_prim[i]));
  return t;
}

static PyObject *binary(int op, PyObject *l, PyObject *r) {
  PyObject *res = eager2(op, l, r);
  if (res || PyErr_Occurred()) return res;
  if (!fallback[op]) Py_RETURN_NOTIMPLEMENTED;
  return PyObject_CallFunctionObjArgs(fallback[op], l, r, NULL);
}

static PyObject *nb_add(PyObject *l, PyObject *r) { return binary(OP_ADD, l, r); }
static PyObject *nb_sub(PyObject *l, PyObject *r) { return binary(OP_SUB, l, r); }
static PyObject *nb_mul(PyObject *l, PyObject *r) { return binary(OP_MUL, l, r); }
static PyObject *nb_div(PyObject *l, PyObject *r) { return binary(OP_DIV, l, r); }

/* eager_setup(Array, scalar_cache, scalar_array, eager_entry, fused_exe, (add, sub, mul, div)) */
static PyObject *eager_setup(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *at, *sc, *sf, *ef, *ff, *fb;
  if (!PyArg_ParseTuple(args, "OO!OOOO!", &at, &PyDict_Type, &sc, &sf, &ef, &ff, &PyTuple_Type, &fb))
    return NULL;
  if (!PyType_Check(at) || PyTuple_Size(fb) != NOPERATORS)
    return PyErr_Format(PyExc_TypeError, "eager_setup: expects the Array class and %d fallbacks", NOPERATORS);
  if (!exe_cache && !(exe_cache = state_cache(state_global))) return NULL;
  if (!no_params && !(no_params = PyTuple_New(0))) return NULL;
  for (int i = 0; i < NOPS; i++)
    if (!op_name[i] && !(op_name[i] = PyUnicode_InternFromString(op_prim[i]))) return NULL;
  PyDict_Clear(exe_cache);
  const char *env = getenv("KILN_EAGER_FUSION");
  fusion = !(env && *env == '0');
  SET_REF(fused_fn, Py_NewRef(ff));
  SET_REF(array_type, (PyTypeObject *)Py_NewRef(at));
  SET_REF(scalar_cache, Py_NewRef(sc));
  SET_REF(scalar_fn, Py_NewRef(sf));
  SET_REF(entry_fn, Py_NewRef(ef));
  for (int i = 0; i < NOPERATORS; i++) SET_REF(fallback[i], Py_NewRef(PyTuple_GetItem(fb, i)));
  Py_RETURN_NONE;
}


/* ---- JitBase: the C half of kiln.jit's wrapper ----
 * A call with positional concrete arrays whose signature was seen before goes straight to the
 * executable: the key is (shape, dtype, weak_type) of each argument, looked up in the wrapper's
 * `_fast` dictionary, whose values the Python half stores as
 * (exe, constant Buffers, output avals, single output?, output tree). Everything else calls the
 * Python `_call`. A change of configuration drops every wrapper's `_fast` entries. */

typedef struct {
  PyObject_HEAD
  PyObject *fast; /* dict, or NULL when this wrapper has no fast path (static arguments) */
  long gen;       /* the configuration state `fast` belongs to (current_state) */
} JitObject;

static PyObject *unflatten; /* tree_util.tree_unflatten(tree, leaves) */

static PyMemberDef jit_members[] = {
    {"_fast", T_OBJECT, offsetof(JitObject, fast), 0, "calls of positional arrays: avals -> entry"},
    {"_fast_state", T_LONG, offsetof(JitObject, gen), READONLY, "the configuration state _fast's entries belong to"},
    {NULL, 0, 0, 0, NULL}};

static int jit_traverse(PyObject *self, visitproc visit, void *arg) {
  Py_VISIT(Py_TYPE(self));
  Py_VISIT(((JitObject *)self)->fast);
  return 0;
}

static int jit_clear(PyObject *self) {
  Py_CLEAR(((JitObject *)self)->fast);
  return 0;
}

static void jit_dealloc(PyObject *self) {
  PyObject_GC_UnTrack(self);
  jit_clear(self);
  PyTypeObject *tp = Py_TYPE(self);
  freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
  f(self);
  Py_DECREF(tp);
}

/* The arguments' key for `fast`: per array leaf its (shape, dtype, weak_type), in tree_flatten's
 * order, and for every container a token ("(" or "[" and its length; "{", its length and its keys;
 * "N" for None), so two calls share a key only when their trees and avals match. Only exact
 * tuples, lists, dicts with str keys (sorted, as tree_util sorts them) and None are walked; any
 * other node, or a leaf that is not a computed kiln.Array, returns 0 (the Python road). The leaves'
 * Buffers are appended to bufs (borrowed). -1: an error. */
typedef struct {
  PyObject *key;   /* list */
  PyObject **bufs; /* `small` (the caller's) until it grows onto the heap */
  Py_ssize_t n, cap;
  PyObject **small;
} fast_walk;

static PyObject *tok_tuple, *tok_list, *tok_dict, *tok_none;

static int walk_add(fast_walk *w, PyObject *o) { return PyList_Append(w->key, o); }

static int walk_args(fast_walk *w, PyObject *o, int depth) {
  if (depth > 32) return 0;
  if (o == Py_None) return walk_add(w, tok_none) ? -1 : 1;
  if (PyTuple_CheckExact(o) || PyList_CheckExact(o)) {
    int is_tuple = PyTuple_CheckExact(o);
    Py_ssize_t n = is_tuple ? PyTuple_Size(o) : PyList_Size(o);
    if (depth > 0) {
      PyObject *len = PyLong_FromSsize_t(n);
      int rc = !len || walk_add(w, is_tuple ? tok_tuple : tok_list) || walk_add(w, len);
      Py_XDECREF(len);
      if (rc) return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
      int r = walk_args(w, is_tuple ? PyTuple_GetItem(o, i) : PyList_GetItem(o, i), depth + 1);
      if (r <= 0) return r;
    }
    return 1;
  }
  if (PyDict_CheckExact(o)) {
    PyObject *keys = PyDict_Keys(o);
    if (!keys) return -1;
    Py_ssize_t n = PyList_Size(keys);
    for (Py_ssize_t i = 0; i < n; i++)
      if (!PyUnicode_CheckExact(PyList_GetItem(keys, i))) {
        Py_DECREF(keys);
        return 0;
      }
    PyObject *len = PyLong_FromSsize_t(n);
    int rc = !len || PyList_Sort(keys) || walk_add(w, tok_dict) || walk_add(w, len);
    Py_XDECREF(len);
    for (Py_ssize_t i = 0; !rc && i < n; i++) rc = walk_add(w, PyList_GetItem(keys, i));
    if (rc) {
      Py_DECREF(keys);
      return -1;
    }
    int r = 1;
    for (Py_ssize_t i = 0; r > 0 && i < n; i++) {
      PyObject *v = PyDict_GetItemWithError(o, PyList_GetItem(keys, i));
      r = v ? walk_args(w, v, depth + 1) : PyErr_Occurred() ? -1 : 0;
    }
    Py_DECREF(keys);
    return r;
  }
  if (!is_kiln_array(o)) return 0;
  ArrayObject *x = (ArrayObject *)o;
  if (materialize(x)) return -1;
  if (!x->buf || !PyObject_TypeCheck(x->buf, (PyTypeObject *)BufferType)) return 0; /* deleted */
  if (w->n == w->cap - 32) { /* room for the constants kept */
    Py_ssize_t cap = w->cap * 2;
    PyObject **b = w->bufs == w->small ? PyMem_Malloc(sizeof *b * (size_t)cap) : PyMem_Realloc(w->bufs, sizeof *b * (size_t)cap);
    if (!b) {
      PyErr_NoMemory();
      return -1;
    }
    if (w->bufs == w->small) memcpy(b, w->small, sizeof *b * (size_t)w->n);
    w->bufs = b, w->cap = cap;
  }
  w->bufs[w->n++] = x->buf;
  return walk_add(w, x->shape) || walk_add(w, x->dtype) || walk_add(w, x->weak) ? -1 : 1;
}

/* The key of args (a tuple) as jit_fast builds it, or None when the call is not the fast path's
 * kind (the Python half stores entries under it). */
static PyObject *jit_key(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *a;
  if (!PyArg_ParseTuple(args, "O!", &PyTuple_Type, &a)) return NULL;
  PyObject *small[96];
  fast_walk w = {PyList_New(0), small, 0, 96, small};
  int r = w.key ? walk_args(&w, a, 0) : -1;
  PyObject *res = r < 0 ? NULL : r == 0 ? Py_NewRef(Py_None) : PyList_AsTuple(w.key);
  Py_XDECREF(w.key);
  if (w.bufs != small) PyMem_Free(w.bufs);
  return res;
}

/* The result of a call found in `fast`, or NULL: with an error set when it failed, without one
 * when the call belongs to the Python road. */
static PyObject *jit_fast(JitObject *j, PyObject *args) {
  if (!array_type || !j->fast || !PyDict_Check(j->fast) || kl_py_tracing()) return NULL;
  long state = current_state();
  if (j->gen != state) {
    PyDict_Clear(j->fast);
    j->gen = state;
    return NULL;
  }
  PyObject *small_bufs[96];
  fast_walk w = {PyList_New(0), small_bufs, 0, 96, small_bufs};
  if (!w.key) return NULL;
  int r = walk_args(&w, args, 0);
  PyObject *key = r > 0 ? PyList_AsTuple(w.key) : NULL;
  Py_DECREF(w.key);
  PyObject **bufs = w.bufs;
  Py_ssize_t n = w.n;
  PyObject *entry = key ? PyDict_GetItemWithError(j->fast, key) : NULL;
  Py_XDECREF(key);
  PyObject *consts = entry ? PyTuple_GetItem(entry, 1) : NULL, *avals = entry ? PyTuple_GetItem(entry, 2) : NULL;
  Py_ssize_t nc = entry ? PyTuple_Size(consts) : 0, no = entry ? PyTuple_Size(avals) : 0;
  if (!entry || no > 64 || nc > 32) { /* not found (or an error), or too many to run here */
    if (bufs != small_bufs) PyMem_Free(bufs);
    return NULL;
  }
  for (Py_ssize_t i = 0; i < nc; i++) bufs[n + i] = PyTuple_GetItem(consts, i);
  Py_INCREF(entry);
  kl_buffer *outs[64];
  PyObject *res = NULL, *list = NULL;
  if (run_exe(PyTuple_GetItem(entry, 0), bufs, (int)(n + nc), outs)) goto done;
  list = PyList_New(no);
  for (Py_ssize_t i = 0; i < no; i++) {
    PyObject *av = PyTuple_GetItem(avals, i);
    PyObject *b = buffer_new_from(outs[i]);
    PyObject *arr = b ? array_new(b, PyTuple_GetItem(av, 0), PyTuple_GetItem(av, 1), PyTuple_GetItem(av, 2)) : NULL;
    if (!arr || !list) {
      Py_XDECREF(arr);
      for (Py_ssize_t k = i + 1; k < no; k++) kl_buf_release(outs[k]);
      goto done;
    }
    PyList_SetItem(list, i, arr);
  }
  if (PyObject_IsTrue(PyTuple_GetItem(entry, 3))) res = Py_NewRef(PyList_GetItem(list, 0));
  else res = PyObject_CallFunctionObjArgs(unflatten, PyTuple_GetItem(entry, 4), list, NULL);
done:
  Py_XDECREF(list);
  Py_DECREF(entry);
  if (bufs != small_bufs) PyMem_Free(bufs);
  return res;
}

static PyObject *jit_call(PyObject *self, PyObject *args, PyObject *kwargs) {
  if (!kwargs || PyDict_Size(kwargs) == 0) {
    PyObject *res = jit_fast((JitObject *)self, args);
    if (res || PyErr_Occurred()) return res;
  }
  PyObject *slow = PyObject_GetAttrString(self, "_call");
  if (!slow) return NULL;
  PyObject *res = PyObject_Call(slow, args, kwargs);
  Py_DECREF(slow);
  return res;
}

static PyType_Slot jit_slots[] = {{Py_tp_dealloc, jit_dealloc},
                                  {Py_tp_traverse, jit_traverse},
                                  {Py_tp_clear, jit_clear},
                                  {Py_tp_members, jit_members},
                                  {Py_tp_call, jit_call},
                                  {Py_tp_doc, "Base of kiln.jit's wrapper: calls of a known signature, in C."},
                                  {0, NULL}};

static PyType_Spec jit_spec = {"kiln._kiln.JitBase", sizeof(JitObject), 0,
                               Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC, jit_slots};

/* config_changed(gen=None): the process-wide settings are now those of configuration state `gen`:
 * eager mode's executables of that state are used (kept per state, so a context manager that
 * sets an option and restores it, as libraries' traces do, recompiles nothing); a jit's fast
 * path keeps to the state of its entries. Without gen (clear_caches): every cached executable is
 * dropped. */
static PyObject *config_changed(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  (void)self;
  state_epoch++;
  if (!exe_cache) Py_RETURN_NONE;
  if (nargs < 1 || args[0] == Py_None) {
    if (exe_caches) PyDict_Clear(exe_caches);
    PyDict_Clear(exe_cache);
    Py_RETURN_NONE;
  }
  long id = PyLong_AsLong(args[0]);
  if (id == -1 && PyErr_Occurred()) return NULL;
  PyObject *cache = state_cache(id);
  if (!cache) return NULL;
  state_global = id;
  SET_REF(exe_cache, cache);
  Py_RETURN_NONE;
}

/* thread_config(gen or None): this thread's settings are those of state gen (it is inside a config
 * context manager), or the process-wide ones (None). */
static PyObject *thread_config(PyObject *self, PyObject *arg) {
  (void)self;
  long id = arg == Py_None ? -1 : PyLong_AsLong(arg);
  if (id == -1 && PyErr_Occurred()) return NULL;
  state_thread = id < 0 ? -1 : id;
  state_thread_epoch = state_epoch;
  Py_RETURN_NONE;
}

/* config_setup(refresh): refresh() gives this thread's state again (by thread_config). */
static PyObject *config_setup(PyObject *self, PyObject *fn) {
  (void)self;
  SET_REF(state_refresh, Py_NewRef(fn));
  Py_RETURN_NONE;
}

/* jit_setup(tree_unflatten) */
static PyObject *jit_setup(PyObject *self, PyObject *fn) {
  (void)self;
  SET_REF(unflatten, Py_NewRef(fn));
  Py_RETURN_NONE;
}

/* eager_shutdown(): at interpreter exit, pending results are dropped instead of launched. */
static PyObject *eager_shutdown(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  deferred_off = 1;
  Py_RETURN_NONE;
}

/* eager_fusion(on) -> the previous setting (tests compare both roads). */
static PyObject *eager_fusion(PyObject *self, PyObject *on) {
  (void)self;
  int old = fusion;
  fusion = PyObject_IsTrue(on);
  return PyBool_FromLong(old);
}

/* eager_stats() -> (fused launches, operations they ran) */
static PyObject *eager_stats(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  return Py_BuildValue("(ll)", n_chains, n_chain_ops);
}

static PyMethodDef array_functions[] = {
    {"eager_export", eager_export, METH_O, "eager_export(buffer): compute pending work before sharing buffer"},
    {"eager_apply", (PyCFunction)(void (*)(void))eager_apply, METH_FASTCALL, "eager_apply(code, x, y=None): the fast path, or None"},
    {"eager_ops", eager_ops, METH_NOARGS, "the fast path's operation names, by code"},
    {"set_eager_check", set_eager_check, METH_O, "set_eager_check(fn or None): fn(prim, results) after each eager op"},
    {"eager_stats", eager_stats, METH_NOARGS, "(fused launches, operations they ran) of eager fusion"},
    {"eager_shutdown", eager_shutdown, METH_NOARGS, "drop pending results from now on (interpreter exit)"},
    {"eager_fusion", eager_fusion, METH_O, "turn eager fusion on or off; returns the previous setting"},
    {"eager_setup", eager_setup, METH_VARARGS, "connects ArrayBase's eager fast path to kiln's Python core"},
    {"config_changed", (PyCFunction)(void (*)(void))config_changed, METH_FASTCALL,
     "config_changed(gen=None): settings of state gen now (None: drop the executables cached in C)"},
    {"thread_config", thread_config, METH_O, "thread_config(gen or None): this thread's own configuration state"},
    {"config_setup", config_setup, METH_O, "config_setup(refresh): refresh() re-sends this thread's state"},
    {"jit_setup", jit_setup, METH_O, "gives JitBase tree_unflatten"},
    {"jit_key", jit_key, METH_VARARGS, "jit_key(args) -> the fast path's key of a call's positional arguments, or None"},
    {"array_delete", array_delete, METH_O, "array_delete(a): drops a's buffer; a raises when used"},
    {"donate_call", donate_call, METH_VARARGS, "donate_call(exe, bufs, donated): a call that may reuse donated buffers"},
    {"array_is_deleted", array_is_deleted, METH_O, "array_is_deleted(a): whether a was deleted (or donated)"},
    {NULL, NULL, 0, NULL}};

static PyType_Slot array_slots[] = {{Py_bf_getbuffer, array_getbuffer},
                                    {Py_tp_dealloc, array_dealloc},
                                    {Py_tp_traverse, array_traverse},
                                    {Py_tp_clear, array_clear},
                                    {Py_tp_members, array_members},
                                    {Py_tp_getset, array_getset},
                                    {Py_nb_add, nb_add},
                                    {Py_nb_subtract, nb_sub},
                                    {Py_nb_multiply, nb_mul},
                                    {Py_nb_true_divide, nb_div},
                                    {Py_tp_doc, "Base of kiln.Array: its fields, the buffer protocol, eager + - * /."},
                                    {0, NULL}};

static PyType_Spec array_spec = {"kiln._kiln.ArrayBase", sizeof(ArrayObject), 0,
                                 Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC, array_slots};

/* ---- for tracer.c: TracerBase extends ArrayBase ---- */

Py_ssize_t kl_py_array_basicsize(void) { return (Py_ssize_t)sizeof(ArrayObject); }

void kl_py_array_set_aval(PyObject *o, PyObject *shape, PyObject *dtype, PyObject *weak) {
  ArrayObject *a = (ArrayObject *)o;
  SET_REF(a->shape, Py_NewRef(shape));
  SET_REF(a->dtype, Py_NewRef(dtype));
  SET_REF(a->weak, Py_NewRef(weak));
}

void kl_py_array_get_aval(PyObject *o, PyObject **shape, PyObject **dtype, PyObject **weak) {
  ArrayObject *a = (ArrayObject *)o;
  *shape = a->shape;
  *dtype = a->dtype;
  *weak = a->weak;
}

int kl_py_array_init(PyObject *m) {
  if (!(tok_tuple = PyUnicode_InternFromString("(")) || !(tok_list = PyUnicode_InternFromString("[")) ||
      !(tok_dict = PyUnicode_InternFromString("{")) || !(tok_none = PyUnicode_InternFromString("N")))
    return -1;
  PyObject *t = PyType_FromSpec(&array_spec);
  if (!t || PyModule_AddObject(m, "ArrayBase", t)) return -1;
  PyObject *j = PyType_FromSpec(&jit_spec);
  if (!j || PyModule_AddObject(m, "JitBase", j)) return -1;
  return PyModule_AddFunctions(m, array_functions);
}
