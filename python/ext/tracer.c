/* tracer.c: the Python binding of the trace state (tracer/trace.h), and bind, kiln's one
 * dispatcher. Trace is a handle on one C trace (kiln's core.Trace); TracerBase, a subclass of
 * ArrayBase, is the C half of core.Tracer (its trace, value id and concrete value); bind runs a
 * primitive on concrete arrays (array.c's eager road) or records it into a trace, in one call.
 * The trace stack itself lives in tracer/; this file only maps Python objects onto it: an
 * object's address is its key for lifting, the handle's `lifted` list keeps those objects alive. */
#include "module.h"

#include <pthread.h>
#include <stddef.h>
#include <string.h>
#include <structmember.h>


#define SET_REF(field, value)           \
  do {                                  \
    PyObject *old_ = (PyObject *)(field); \
    (field) = (value);                  \
    Py_XDECREF(old_);                   \
  } while (0)

/* Trace state is per thread, as JAX keeps it: threads that trace at once (grad, vmap, jit meeting
 * a new shape) each push and pop their own stack. Made on a thread's first use; freed when the
 * thread ends (pthread key), or leaked if traces were somehow left live on it. */
static _Thread_local kl_trace_stack *stack;
static pthread_key_t stack_key;
static pthread_once_t stack_key_once = PTHREAD_ONCE_INIT;
static kl_trace_value_fn value_hook_fn;

static void stack_at_exit(void *s) {
  if (s && kl_trace_depth(s) == 0) kl_trace_stack_free(s);
}

static void make_stack_key(void) { (void)pthread_key_create(&stack_key, stack_at_exit); }

/* The calling thread's stack, made on first use; NULL with MemoryError set. */
static kl_trace_stack *thread_stack(void) {
  if (stack) return stack;
  kl_trace_stack *s = kl_trace_stack_new();
  if (!s) {
    PyErr_NoMemory();
    return NULL;
  }
  kl_trace_stack_set_value_hook(s, value_hook_fn, NULL);
  pthread_once(&stack_key_once, make_stack_key);
  (void)pthread_setspecific(stack_key, s);
  return stack = s;
}

typedef struct {
  PyObject_HEAD
  kl_trace *t;      /* one reference */
  PyObject *lifted; /* list: the objects lifted as extra inputs, in input order (core: consts) */
} TraceObject;

/* TracerBase's fields, after ArrayBase's (at fields_off: ArrayObject is array.c's). */
typedef struct {
  PyObject *trace; /* its Trace */
  PyObject *cval;  /* concrete value (an Array), or NULL */
  int vid;         /* its value id in the trace's program; -1: none (literal of an ended trace) */
} TracerFields;

static Py_ssize_t fields_off;
#define FIELDS(o) ((TracerFields *)((char *)(o) + fields_off))

static PyTypeObject *TraceType, *TracerBaseType, *ArrayBaseType;
static PyTypeObject *tracer_type;      /* core.Tracer, the class new tracers get */
static PyObject *scalar_fn;            /* core.scalar_array(value, dtype, weak) */
static PyObject *unexpected_error;     /* kiln.errors.UnexpectedTracerError */
static PyObject *dtype_obj[KL_NDTYPES]; /* the NumPy dtype of each kl_dtype */
static PyObject *prim_codes;           /* name -> kl_prim, memo of kl_prim_from_name */
static destructor base_dealloc;
static traverseproc base_traverse;
static inquiry base_clear;

int kl_py_tracing(void) { return stack && kl_trace_depth(stack) != 0; }

/* ---- conversions ---- */

static struct {
  PyObject *obj; /* a dtype object (one reference), or NULL */
  kl_dtype d;
} dtype_memo[32];

/* The kl_dtype of a NumPy dtype object (memoized by identity); -1 with an error if none. */
static int dtype_of(PyObject *dt, kl_dtype *out) {
  for (int i = 0; i < 32 && dtype_memo[i].obj; i++)
    if (dtype_memo[i].obj == dt) {
      *out = dtype_memo[i].d;
      return 0;
    }
  PyObject *name = PyObject_GetAttrString(dt, "name");
  const char *s = name ? PyUnicode_AsUTF8AndSize(name, NULL) : NULL;
  if (!s) {
    Py_XDECREF(name);
    return -1;
  }
  if (kl_dtype_from_name(s, out)) {
    PyErr_Format(PyExc_TypeError, "kiln does not support dtype %s", s);
    Py_DECREF(name);
    return -1;
  }
  Py_DECREF(name);
  for (int i = 0; i < 32; i++)
    if (!dtype_memo[i].obj) {
      dtype_memo[i].obj = Py_NewRef(dt);
      dtype_memo[i].d = *out;
      break;
    }
  return 0;
}

/* An aval from Python shape, dtype and weak objects. 0, or -1 with an error. */
static int aval_of(PyObject *shape, PyObject *dtype, PyObject *weak, kl_aval *a) {
  memset(a, 0, sizeof *a);
  if (dtype_of(dtype, &a->dtype)) return -1;
  int w = PyObject_IsTrue(weak);
  if (w < 0) return -1;
  a->weak = (uint8_t)w;
  PyObject *t = PySequence_Tuple(shape);
  if (!t) return -1;
  Py_ssize_t n = PyTuple_Size(t);
  if (n > KL_MAX_RANK) {
    Py_DECREF(t);
    PyErr_Format(PyExc_ValueError, "input: rank %zd exceeds kiln's maximum rank %d", n, KL_MAX_RANK);
    return -1;
  }
  for (Py_ssize_t i = 0; i < n; i++) {
    a->dims[i] = PyLong_AsLongLong(PyTuple_GetItem(t, i));
    if (a->dims[i] == -1 && PyErr_Occurred()) {
      Py_DECREF(t);
      return -1;
    }
  }
  a->ndim = (int8_t)n;
  Py_DECREF(t);
  return 0;
}

static PyObject *shape_tuple(const kl_aval *a) {
  PyObject *t = PyTuple_New(a->ndim);
  for (int i = 0; t && i < a->ndim; i++) {
    PyObject *d = PyLong_FromLongLong(a->dims[i]);
    if (!d) {
      Py_DECREF(t);
      return NULL;
    }
    PyTuple_SetItem(t, i, d);
  }
  return t;
}

static int prim_of(PyObject *name, kl_prim *out) {
  PyObject *code = PyDict_GetItemWithError(prim_codes, name);
  if (code) {
    *out = (kl_prim)PyLong_AsLong(code);
    return 0;
  }
  if (PyErr_Occurred()) return -1;
  const char *s = PyUnicode_AsUTF8AndSize(name, NULL);
  if (!s) return -1;
  if (kl_prim_from_name(s, out)) {
    PyErr_Format(PyExc_ValueError, "unknown primitive %s", s);
    return -1;
  }
  code = PyLong_FromLong((long)*out);
  int rc = code ? PyDict_SetItem(prim_codes, name, code) : -1;
  Py_XDECREF(code);
  return rc;
}

/* ---- tracers ---- */

static int is_tracer(PyObject *o) { return PyObject_TypeCheck(o, TracerBaseType); }

int kl_py_is_tracer(PyObject *o) { return TracerBaseType && is_tracer(o); }

/* A new core.Tracer of trace handle `trace` (borrowed arguments). */
static PyObject *tracer_new(PyObject *trace, int vid, PyObject *shape, PyObject *dtype, PyObject *weak,
                            PyObject *cval) {
  allocfunc alloc = (allocfunc)PyType_GetSlot(tracer_type, Py_tp_alloc);
  PyObject *o = alloc(tracer_type, 0);
  if (!o) return NULL;
  kl_py_array_set_aval(o, shape, dtype, weak);
  TracerFields *f = FIELDS(o);
  f->trace = Py_NewRef(trace);
  f->cval = cval == Py_None ? NULL : Py_XNewRef(cval);
  f->vid = vid;
  return o;
}

/* A tracer of trace `trace` for value `vid` of its program, with the aval the program gives. */
static PyObject *tracer_for(PyObject *trace, const kl_aval *a, int vid, PyObject *cval) {
  PyObject *shape = shape_tuple(a);
  if (!shape) return NULL;
  PyObject *res = tracer_new(trace, vid, shape, dtype_obj[a->dtype], a->weak ? Py_True : Py_False, cval);
  Py_DECREF(shape);
  return res;
}

static void tracer_dealloc(PyObject *self) {
  PyObject_GC_UnTrack(self);
  TracerFields *f = FIELDS(self);
  Py_CLEAR(f->trace);
  Py_CLEAR(f->cval);
  base_dealloc(self); /* ArrayBase's: untracked already, frees the object */
}

static int tracer_traverse(PyObject *self, visitproc visit, void *arg) {
  TracerFields *f = FIELDS(self);
  Py_VISIT(f->trace);
  Py_VISIT(f->cval);
  return base_traverse(self, visit, arg); /* visits the type */
}

static int tracer_clear(PyObject *self) {
  TracerFields *f = FIELDS(self);
  Py_CLEAR(f->trace);
  Py_CLEAR(f->cval);
  return base_clear(self);
}

static PyMemberDef tracer_members[] = {
    {"_trace", T_OBJECT, 0, READONLY, "the Trace this value belongs to"},
    {"_cval", T_OBJECT, 0, READONLY, "the concrete value (concrete traces), or None"},
    {"_vid", T_INT, 0, READONLY, "the value id in the trace's program"},
    {NULL, 0, 0, 0, NULL}};

static PyType_Slot tracer_slots[] = {{Py_tp_dealloc, tracer_dealloc},
                                     {Py_tp_traverse, tracer_traverse},
                                     {Py_tp_clear, tracer_clear},
                                     {Py_tp_members, tracer_members},
                                     {Py_tp_doc, "Base of kiln's Tracer: a value inside a trace."},
                                     {0, NULL}};

static PyType_Spec tracer_spec = {"kiln._kiln.TracerBase", 0, 0,
                                  Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC, tracer_slots};

/* UnexpectedTracerError.for_tracer(x[, context]) raised. */
static void raise_leaked(PyObject *x, PyObject *context) {
  PyObject *exc = context ? PyObject_CallMethod(unexpected_error, "for_tracer", "OO", x, context)
                          : PyObject_CallMethod(unexpected_error, "for_tracer", "O", x);
  if (!exc) return;
  PyErr_SetObject(unexpected_error, exc);
  Py_DECREF(exc);
}

/* ---- operands ---- */

/* kl_operand of Python object x (borrowed for as long as o is used): a tracer, or a constant
 * (a kiln array, lifted with the aval written to *aval; anything else has no aval). 0, or -1
 * with an error. */
static int operand_of(PyObject *x, kl_operand *o, kl_aval *aval) {
  o->key = (uintptr_t)x;
  o->vid = 0;
  o->aval = NULL;
  if (is_tracer(x)) {
    TracerFields *f = FIELDS(x);
    o->trace = f->trace ? ((TraceObject *)f->trace)->t : NULL; /* NULL: cleared by the GC, unusable */
    o->vid = f->vid;
    o->value = f->cval;
    return 0;
  }
  o->trace = NULL;
  o->value = x;
  if (PyObject_TypeCheck(x, ArrayBaseType)) {
    PyObject *shape, *dtype, *weak;
    kl_py_array_get_aval(x, &shape, &dtype, &weak);
    if (!shape || !dtype || !weak) return 0; /* not set up: not an array */
    if (aval_of(shape, dtype, weak, aval)) return -1;
    o->aval = aval;
  }
  return 0;
}

/* TypeError for an operand that is no kiln array; returns NULL. */
static PyObject *cannot_trace(PyObject *x) {
  PyObject *name = PyType_GetName(Py_TYPE(x));
  if (name) PyErr_Format(PyExc_TypeError, "internal: cannot trace %U", name);
  Py_XDECREF(name);
  return NULL;
}

/* ---- Trace handles ---- */

static PyObject *trace_wrap(kl_trace *t) {
  TraceObject *h = (TraceObject *)PyType_GenericAlloc(TraceType, 0);
  if (!h) return NULL;
  h->lifted = PyList_New(0);
  if (!h->lifted) {
    Py_DECREF(h);
    return NULL;
  }
  h->t = t;
  kl_trace_set_client(t, h);
  return (PyObject *)h;
}

static void trace_dealloc(PyObject *self) {
  PyObject_GC_UnTrack(self);
  TraceObject *h = (TraceObject *)self;
  Py_CLEAR(h->lifted);
  if (h->t) {
    kl_trace_set_client(h->t, NULL);
    kl_trace_release(h->t);
  }
  PyTypeObject *tp = Py_TYPE(self);
  freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
  f(self);
  Py_DECREF(tp);
}

static int trace_traverse(PyObject *self, visitproc visit, void *arg) {
  Py_VISIT(Py_TYPE(self));
  Py_VISIT(((TraceObject *)self)->lifted);
  return 0;
}

static int trace_clear(PyObject *self) {
  Py_CLEAR(((TraceObject *)self)->lifted);
  return 0;
}

/* How many lifted objects h keeps: the count `note_lifted` starts from. */
static int lifted_count(TraceObject *h) { return h->lifted ? (int)PyList_Size(h->lifted) : 0; }

/* Keeps the objects newly lifted into h's trace (keys from `from` on) alive in h->lifted: an
 * object's address is its key, so it must not be freed (and reused) while the trace lives. */
static int note_lifted(TraceObject *h, int from) {
  int n = kl_trace_num_lifted(h->t);
  for (int i = from; h->lifted && i < n; i++)
    if (PyList_Append(h->lifted, (PyObject *)kl_trace_lifted_key(h->t, i))) return -1;
  return 0;
}

/* new_input(shape, dtype, weak, value=None) -> Tracer: a new program input (an argument of the
 * traced function); value is kept as its concrete value in a concrete trace. */
static PyObject *trace_new_input(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  TraceObject *h = (TraceObject *)self;
  if (nargs < 3 || nargs > 4) return PyErr_Format(PyExc_TypeError, "new_input(shape, dtype, weak, value=None)");
  kl_aval a;
  if (aval_of(args[0], args[1], args[2], &a)) return NULL;
  int vid = kl_trace_new_input(h->t, &a);
  if (vid < 0) return PyErr_Format(PyExc_RuntimeError, "internal: new_input into a finished trace");
  PyObject *value = nargs == 4 && kl_trace_is_concrete(h->t) ? args[3] : NULL;
  return tracer_new(self, vid, args[0], args[1], args[2], value);
}

/* literal_tracer(value, dtype, weak) -> Tracer of a scalar literal (one per distinct literal and
 * trace). A literal of an ended trace gets no equation: using it raises UnexpectedTracerError. */
static PyObject *trace_literal_tracer(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  TraceObject *h = (TraceObject *)self;
  if (nargs != 3) return PyErr_Format(PyExc_TypeError, "literal_tracer(value, dtype, weak)");
  kl_dtype d;
  if (dtype_of(args[1], &d)) return NULL;
  int weak = PyObject_IsTrue(args[2]);
  if (weak < 0) return NULL;
  int64_t ival = 0;
  double fval = 0, fimag = 0;
  if (kl_dtype_kind(d) == KL_KIND_FLOAT) {
    fval = PyFloat_AsDouble(args[0]);
    if (fval == -1.0 && PyErr_Occurred()) return NULL;
  } else if (kl_dtype_is_complex(d)) { /* through complex(): a NumPy complex64 is no Python complex */
    PyObject *c = PyComplex_Check(args[0]) ? Py_NewRef(args[0]) : PyObject_CallFunctionObjArgs((PyObject *)&PyComplex_Type, args[0], NULL);
    if (!c) return NULL;
    fval = PyComplex_RealAsDouble(c);
    fimag = PyComplex_ImagAsDouble(c);
    Py_DECREF(c);
    if (PyErr_Occurred()) return NULL;
  } else {
    PyObject *n = PyNumber_Long(args[0]);
    if (!n) return NULL;
    ival = PyLong_AsLongLong(n);
    if (ival == -1 && PyErr_Occurred() && kl_dtype_kind(d) == KL_KIND_UINT && PyErr_ExceptionMatches(PyExc_OverflowError)) {
      /* a uint64 past INT64_MAX: its bits (bug, issue 32: a uint64 literal of 2**63 or more raised
       * OverflowError under jit) */
      PyErr_Clear();
      unsigned long long u = PyLong_AsUnsignedLongLong(n);
      ival = (int64_t)u;
      if (u == (unsigned long long)-1 && PyErr_Occurred()) ival = -1;
    }
    Py_DECREF(n);
    if (ival == -1 && PyErr_Occurred()) return NULL;
  }
  int vid = -1;
  char err[512];
  int rc = kl_trace_literal(h->t, d, weak, ival, fval, fimag, &vid, err, sizeof err);
  if (rc == KL_TRACE_RULE_ERROR || rc == KL_TRACE_NOMEM) return kl_py_raise(NULL, err);
  PyObject *cval = NULL;
  if (kl_trace_is_concrete(h->t) && !(cval = PyObject_CallFunctionObjArgs(scalar_fn, args[0], args[1], args[2], NULL)))
    return NULL;
  PyObject *empty = PyTuple_New(0);
  PyObject *res = empty ? tracer_new(self, rc ? -1 : vid, empty, args[1], args[2], cval) : NULL;
  Py_XDECREF(empty);
  Py_XDECREF(cval);
  return res;
}

/* vid_of(x) -> the value id standing for x (a tracer of this trace, of an enclosing trace, or a
 * concrete array: the last two become extra inputs). */
static PyObject *trace_vid_of(PyObject *self, PyObject *x) {
  TraceObject *h = (TraceObject *)self;
  kl_operand o;
  kl_aval a;
  if (operand_of(x, &o, &a)) return NULL;
  int vid, from = lifted_count(h);
  int rc = kl_trace_vid_of(h->t, &o, &vid);
  if (note_lifted(h, from)) return NULL;
  if (rc == KL_TRACE_DEAD) {
    raise_leaked(x, NULL);
    return NULL;
  }
  if (rc == KL_TRACE_NOMEM) return PyErr_NoMemory();
  if (rc) return cannot_trace(x);
  return PyLong_FromLong(vid);
}

/* set_outputs(ids): the program's outputs. */
static PyObject *trace_set_outputs(PyObject *self, PyObject *arg) {
  kl_program *pg = kl_trace_program(((TraceObject *)self)->t);
  if (!pg) return PyErr_Format(PyExc_RuntimeError, "internal: set_outputs of a finished trace");
  PyObject *t = PySequence_Tuple(arg);
  if (!t) return NULL;
  Py_ssize_t n = PyTuple_Size(t);
  int *ov = PyMem_Malloc(sizeof(int) * (size_t)(n + 1));
  if (!ov) {
    Py_DECREF(t);
    return PyErr_NoMemory();
  }
  for (Py_ssize_t i = 0; i < n; i++) {
    ov[i] = (int)PyLong_AsLong(PyTuple_GetItem(t, i));
    if (ov[i] < 0 || ov[i] >= pg->nvals) {
      PyMem_Free(ov);
      Py_DECREF(t);
      return PyErr_Occurred() ? NULL : PyErr_Format(PyExc_ValueError, "set_outputs: unknown value %d", ov[i]);
    }
  }
  Py_DECREF(t);
  kl_program_set_outputs(pg, ov, (int)n);
  PyMem_Free(ov);
  Py_RETURN_NONE;
}

/* take_builder() -> Builder owning the traced program; the trace keeps none afterwards. */
static PyObject *trace_take_builder(PyObject *self, PyObject *unused) {
  (void)unused;
  kl_program *pg = kl_trace_take_program(((TraceObject *)self)->t);
  if (!pg) return PyErr_Format(PyExc_RuntimeError, "internal: the trace's program was taken already");
  return kl_py_builder_wrap(pg);
}

/* equations(from=0): the equations recorded so far (from index `from` on), like Builder.equations();
 * input_ids(): the program's input value ids so far (new inputs, then lifted values, in order). */
static PyObject *trace_equations(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  long from = 0;
  if (nargs > 1) return PyErr_Format(PyExc_TypeError, "equations(from=0)");
  if (nargs == 1 && (from = PyLong_AsLong(args[0])) == -1 && PyErr_Occurred()) return NULL;
  kl_program *pg = kl_trace_program(((TraceObject *)self)->t);
  if (!pg) return PyErr_Format(PyExc_RuntimeError, "internal: the trace's program was taken already");
  return kl_py_program_equations(pg, (int)from);
}

static PyObject *trace_input_ids(PyObject *self, PyObject *unused) {
  (void)unused;
  kl_program *pg = kl_trace_program(((TraceObject *)self)->t);
  if (!pg) return PyErr_Format(PyExc_RuntimeError, "internal: the trace's program was taken already");
  PyObject *t = PyTuple_New(pg->ninputs);
  for (int i = 0; t && i < pg->ninputs; i++) PyTuple_SetItem(t, i, PyLong_FromLong(pg->inputs[i]));
  return t;
}

static PyObject *trace_get_alive(PyObject *self, void *unused) {
  (void)unused;
  return PyBool_FromLong(kl_trace_alive(((TraceObject *)self)->t));
}

static PyObject *trace_get_level(PyObject *self, void *unused) {
  (void)unused;
  return PyLong_FromLong(kl_trace_level(((TraceObject *)self)->t));
}

static PyObject *trace_get_concrete(PyObject *self, void *unused) {
  (void)unused;
  return PyBool_FromLong(kl_trace_is_concrete(((TraceObject *)self)->t));
}

static PyObject *trace_get_consts(PyObject *self, void *unused) {
  (void)unused;
  PyObject *l = ((TraceObject *)self)->lifted;
  return l ? PyList_GetSlice(l, 0, PyList_Size(l)) : PyList_New(0);
}

static PyMethodDef trace_methods[] = {
    {"new_input", (PyCFunction)(void (*)(void))trace_new_input, METH_FASTCALL,
     "new_input(shape, dtype, weak, value=None) -> Tracer"},
    {"literal_tracer", (PyCFunction)(void (*)(void))trace_literal_tracer, METH_FASTCALL,
     "literal_tracer(value, dtype, weak) -> Tracer"},
    {"vid_of", trace_vid_of, METH_O, "vid_of(x) -> value id (lifting outer values and constants)"},
    {"set_outputs", trace_set_outputs, METH_O, "set_outputs(ids)"},
    {"take_builder", trace_take_builder, METH_NOARGS, "take_builder() -> Builder of the traced program"},
    {"equations", (PyCFunction)(void (*)(void))trace_equations, METH_FASTCALL,
     "equations(from=0) -> the equations recorded so far, as Builder.equations() lists them"},
    {"input_ids", trace_input_ids, METH_NOARGS, "input value ids of the program so far"},
    {NULL, NULL, 0, NULL}};

static PyObject *trace_get_main(PyObject *self, void *unused) {
  (void)unused;
  return Py_NewRef(self);
}

static PyGetSetDef trace_getset[] = {
    {"main", trace_get_main, NULL, "the trace itself (JAX's MainTrace: compared by identity)", NULL},
    {"alive", trace_get_alive, NULL, "False once the trace ended", NULL},
    {"level", trace_get_level, NULL, "0 for the outermost trace", NULL},
    {"concrete", trace_get_concrete, NULL, "whether values are computed as they are traced", NULL},
    {"consts", trace_get_consts, NULL, "the objects lifted as extra inputs, in input order", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyType_Slot trace_slots[] = {{Py_tp_dealloc, trace_dealloc},
                                    {Py_tp_traverse, trace_traverse},
                                    {Py_tp_clear, trace_clear},
                                    {Py_tp_methods, trace_methods},
                                    {Py_tp_getset, trace_getset},
                                    {Py_tp_doc, "A trace: a handle on kiln's C trace state (tracer/trace.h)."},
                                    {0, NULL}};

static PyType_Spec trace_spec = {"kiln._kiln.Trace", sizeof(TraceObject), 0, Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
                                 trace_slots};

/* ---- binding ---- */

/* What the concrete-value hook needs of the `record` call in progress (one per nesting). */
typedef struct {
  PyObject *prim, *params; /* as bind got them (borrowed) */
  PyObject *values;        /* the hook's result: a tuple of Arrays (owned), or NULL */
} hook_frame;

static hook_frame *frame;

static PyObject *dispatch(PyObject *prim, PyObject *const *xs, Py_ssize_t n, PyObject *params);

/* params with each body that holds an effect callback replaced by a copy without them (a new
 * dict), or NULL (none does; or an error is set). A concrete trace computes a loop's values
 * eagerly, and the traced program runs its debug prints again later: they must run once. */
static PyObject *quiet_params(PyObject *params) {
  PyObject *key, *val, *out = NULL;
  Py_ssize_t pos = 0;
  while (PyDict_Next(params, &pos, &key, &val)) {
    kl_program *pg = kl_py_is_builder(val) ? kl_py_builder_program(val) : NULL;
    if (!pg || !kl_program_has_effects(pg)) continue;
    kl_program *quiet = kl_program_without_effects(pg);
    PyObject *b = quiet ? kl_py_builder_wrap(quiet) : PyErr_NoMemory();
    if (!b || (!out && !(out = PyDict_Copy(params))) || PyDict_SetItem(out, key, b)) {
      Py_XDECREF(b);
      Py_XDECREF(out);
      return NULL;
    }
    Py_DECREF(b);
  }
  return out;
}

/* The concrete-value hook: runs the equation on the operands' values (eagerly: they are arrays). */
static int value_hook(void *ctx, const kl_trace_eqn *e) {
  (void)ctx;
  PyObject *small[16] = {0};
  PyObject **vals = e->nin <= 16 ? small : PyMem_Malloc(sizeof(PyObject *) * (size_t)e->nin);
  if (!vals) {
    PyErr_NoMemory();
    return -1;
  }
  for (int i = 0; i < e->nin; i++) vals[i] = (PyObject *)e->ins[i].value;
  hook_frame *fr = frame; /* read once: compiling may let another thread bind meanwhile */
  PyObject *quiet = PyDict_Check(fr->params) ? quiet_params(fr->params) : NULL;
  PyObject *res = PyErr_Occurred() ? NULL : dispatch(fr->prim, vals, e->nin, quiet ? quiet : fr->params);
  Py_XDECREF(quiet);
  if (vals != small) PyMem_Free(vals);
  if (!res) return -1;
  if (!PyTuple_Check(res) || PyTuple_Size(res) != e->nout) {
    Py_DECREF(res);
    PyErr_SetString(PyExc_SystemError, "internal: the eager bind gave another number of values");
    return -1;
  }
  fr->values = res;
  return 0;
}

/* Records `prim[params](xs)` into the innermost trace among xs (see kl_trace_bind); a tuple of
 * Tracers. */
static PyObject *record(PyObject *prim_name, PyObject *const *xs, Py_ssize_t n, PyObject *params, kl_trace *stage) {
  kl_prim prim;
  if (prim_of(prim_name, &prim)) return NULL;
  kl_params p;
  int64_t store[8][64];
  if (kl_py_parse_params(prim, params, &p, store)) return NULL;
  kl_operand small_ops[8];
  kl_aval small_avals[8];
  kl_operand *ops = n <= 8 ? small_ops : PyMem_Malloc(sizeof(kl_operand) * (size_t)n);
  kl_aval *avals = n <= 8 ? small_avals : PyMem_Malloc(sizeof(kl_aval) * (size_t)n);
  PyObject *res = NULL;
  hook_frame fr = {prim_name, params, NULL}, *saved = frame;
  if (!ops || !avals) {
    PyErr_NoMemory();
    goto done;
  }
  for (Py_ssize_t i = 0; i < n; i++)
    if (operand_of(xs[i], &ops[i], &avals[i])) goto done;
  kl_trace *into = NULL;
  int outs[KL_MAX_OUTS], nout = 0, computed = 0, bad = 0, from = 0;
  char err[1024];
  TraceObject *h = NULL;
  kl_trace *target = stage; /* the trace it will go to: the innermost of `stage` and the operands' */
  for (Py_ssize_t i = 0; i < n; i++)
    if (ops[i].trace && (!target || kl_trace_level(ops[i].trace) > kl_trace_level(target))) target = ops[i].trace;
  if (target) h = kl_trace_client(target);
  if (h) from = lifted_count(h); /* the lifted count before */
  frame = &fr;
  int rc = kl_trace_bind_in(stage, prim, &p, ops, (int)n, &into, outs, &nout, &computed, &bad, err, sizeof err);
  frame = saved;
  if (into && kl_trace_client(into) && note_lifted(kl_trace_client(into), from)) goto done;
  switch (rc) {
  case KL_TRACE_OK: break;
  case KL_TRACE_DEAD: {
    PyObject *ctx = PyUnicode_FromFormat("It was passed to %U.", prim_name);
    if (ctx) raise_leaked(xs[bad], ctx);
    Py_XDECREF(ctx);
    goto done;
  }
  case KL_TRACE_NO_TRACE: PyErr_Format(PyExc_TypeError, "%U: operands must be kiln arrays", prim_name); goto done;
  case KL_TRACE_BAD_OPERAND:
    cannot_trace(xs[bad]);
    goto done;
  case KL_TRACE_RULE_ERROR: case KL_TRACE_NOMEM: kl_py_raise(NULL, err); goto done;
  default: goto done; /* the hook's error is set */
  }
  PyObject *handle = kl_trace_client(into);
  const kl_program *pg = kl_trace_program(into);
  res = PyTuple_New(nout);
  for (int i = 0; res && i < nout; i++) {
    PyObject *t = tracer_for(handle, &pg->vals[outs[i]].aval, outs[i], computed ? PyTuple_GetItem(fr.values, i) : NULL);
    if (!t) Py_CLEAR(res);
    else PyTuple_SetItem(res, i, t);
  }
done:
  Py_XDECREF(fr.values);
  if (ops != small_ops) PyMem_Free(ops);
  if (avals != small_avals) PyMem_Free(avals);
  return res;
}

/* The bind hook (kiln.experimental.checkify's automatic checks): when set, called as
 * hook(prim, operands, params, results) after each equation is recorded or run by bind (not by
 * array.c's fused fast path), never re-entered by the
 * equations it records itself. NULL (the usual case) costs one pointer test per equation. */
static PyObject *bind_hook;
static _Thread_local int in_bind_hook;

static PyObject *after_record(PyObject *prim_name, PyObject *const *xs, Py_ssize_t n, PyObject *params, PyObject *res) {
  if (!res || !bind_hook || in_bind_hook) return res;
  PyObject *ops = PyTuple_New(n);
  if (!ops) {
    Py_DECREF(res);
    return NULL;
  }
  for (Py_ssize_t i = 0; i < n; i++) PyTuple_SetItem(ops, i, Py_NewRef(xs[i]));
  in_bind_hook = 1;
  PyObject *r = PyObject_CallFunctionObjArgs(bind_hook, prim_name, ops, params ? params : Py_None, res, NULL);
  in_bind_hook = 0;
  Py_DECREF(ops);
  if (!r) {
    Py_DECREF(res);
    return NULL;
  }
  Py_DECREF(r);
  return res;
}

/* set_bind_hook(fn or None) -> the previous hook (None if none) */
static PyObject *mod_set_bind_hook(PyObject *self, PyObject *arg) {
  (void)self;
  PyObject *old = bind_hook ? bind_hook : Py_NewRef(Py_None);
  bind_hook = arg == Py_None ? NULL : Py_NewRef(arg);
  return old;
}

/* The dispatcher: prim on concrete arrays runs eagerly (array.c: one executable cache with the
 * fast path), anything else is recorded into a trace. */
static _Thread_local int compile_time_eval; /* ensure_compile_time_eval (per thread): nullary primitives run now */

/* Whether prim[params] is an effect (debug.callback, io_callback): params' "effect" is set. */
static int is_effect(PyObject *prim, PyObject *params) {
  if (!params || !PyDict_Check(params) || PyUnicode_CompareWithASCIIString(prim, "callback")) return 0;
  PyObject *e = PyDict_GetItemString(params, "effect");
  return e && PyObject_IsTrue(e) > 0;
}

static PyObject *dispatch(PyObject *prim, PyObject *const *xs, Py_ssize_t n, PyObject *params) {
  /* An effect replayed from a recorded program (eval_jaxpr, an inlined vjp or linearize) is
   * staged into the innermost abstract trace, as JAX's dynamic trace does, even when its operands
   * are constants or tracers of outer traces: an eval_shape or a discarded linearize inside jit
   * must not print from the jit program. */
  if (stack && is_effect(prim, params)) {
    kl_trace *cur = kl_trace_current(stack);
    if (cur && !kl_trace_is_concrete(cur) && kl_trace_client(cur))
      return after_record(prim, xs, n, params, record(prim, xs, n, params, cur));
  }
  for (Py_ssize_t i = 0; i < n; i++)
    if (!kl_py_is_array(xs[i])) return after_record(prim, xs, n, params, record(prim, xs, n, params, NULL));
  /* A primitive without operands (iota) inside an abstract trace (jit, make_jaxpr) is staged
   * into it, as JAX does: a causal mask built from iota stays an expression the kernels compute,
   * never a constant array in memory. Concrete traces (grad outside jit) compute it at once. */
  kl_trace *cur = n == 0 && stack && !compile_time_eval ? kl_trace_current(stack) : NULL;
  if (cur && !kl_trace_is_concrete(cur) && kl_trace_client(cur))
    return after_record(prim, xs, n, params, record(prim, xs, n, params, cur));
  return after_record(prim, xs, n, params, kl_py_eager_bind(prim, xs, n, params));
}

/* bind(prim, args, params=None) -> tuple of results (kiln's core.bind): arrays when every
 * operand is a concrete array, else Tracers of the innermost trace among them. */
static PyObject *mod_bind(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  (void)self;
  if (nargs < 2 || nargs > 3) return PyErr_Format(PyExc_TypeError, "bind(prim, args, params=None)");
  PyObject *params = nargs == 3 ? args[2] : Py_None;
  PyObject *items = PyTuple_Check(args[1]) || PyList_Check(args[1]) ? Py_NewRef(args[1]) : PySequence_Tuple(args[1]);
  if (!items) return NULL;
  int list = PyList_Check(items);
  Py_ssize_t n = list ? PyList_Size(items) : PyTuple_Size(items);
  PyObject *small[16];
  PyObject **xs = n <= 16 ? small : PyMem_Malloc(sizeof(PyObject *) * (size_t)n);
  if (!xs) {
    Py_DECREF(items);
    return PyErr_NoMemory();
  }
  for (Py_ssize_t i = 0; i < n; i++) xs[i] = Py_NewRef(list ? PyList_GetItem(items, i) : PyTuple_GetItem(items, i));
  PyObject *res = dispatch(args[0], xs, n, params);
  for (Py_ssize_t i = 0; i < n; i++) Py_DECREF(xs[i]);
  if (xs != small) PyMem_Free(xs);
  Py_DECREF(items);
  return res;
}

/* set_compile_time_eval(on) -> the previous setting */
static PyObject *mod_set_compile_time_eval(PyObject *self, PyObject *arg) {
  (void)self;
  int on = PyObject_IsTrue(arg);
  if (on < 0) return NULL;
  int old = compile_time_eval;
  compile_time_eval = on;
  return PyBool_FromLong(old);
}

/* ---- the stack ---- */

/* trace_push(concrete=False) -> Trace: a new innermost trace. */
static PyObject *mod_trace_push(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  (void)self;
  int concrete = nargs > 0 ? PyObject_IsTrue(args[0]) : 0;
  if (concrete < 0) return NULL;
  if (!thread_stack()) return NULL;
  kl_trace *t = kl_trace_push(stack, concrete);
  if (!t) return PyErr_NoMemory();
  PyObject *h = trace_wrap(t);
  if (!h) {
    kl_trace_pop(stack, t);
    kl_trace_release(t);
    return NULL;
  }
  return Py_NewRef(h); /* one reference for the caller, one held while the trace is live */
}

/* trace_pop(trace): ends the innermost trace (AssertionError if `trace` is not it). */
static PyObject *mod_trace_pop(PyObject *self, PyObject *arg) {
  (void)self;
  if (!PyObject_TypeCheck(arg, TraceType) || !stack || kl_trace_pop(stack, ((TraceObject *)arg)->t)) {
    PyErr_SetString(PyExc_AssertionError, "trace_pop: not the innermost trace");
    return NULL;
  }
  Py_DECREF(arg); /* the reference held while it was live */
  Py_RETURN_NONE;
}

/* current_trace() -> the innermost live Trace, or None. */
static PyObject *mod_current_trace(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  kl_trace *t = stack ? kl_trace_current(stack) : NULL;
  return Py_NewRef(t ? (PyObject *)kl_trace_client(t) : Py_None);
}

static PyObject *mod_tracing(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  return PyBool_FromLong(kl_py_tracing());
}

/* tracer_setup(Tracer, scalar_array, UnexpectedTracerError, {dtype name: dtype}) */
static PyObject *mod_tracer_setup(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *tt, *sf, *ue, *dts;
  if (!PyArg_ParseTuple(args, "OOOO!", &tt, &sf, &ue, &PyDict_Type, &dts)) return NULL;
  if (!PyType_Check(tt) || !PyType_IsSubtype((PyTypeObject *)tt, TracerBaseType))
    return PyErr_Format(PyExc_TypeError, "tracer_setup: expects a subclass of TracerBase");
  for (int d = 0; d < KL_NDTYPES; d++) {
    PyObject *o = PyDict_GetItemString(dts, kl_dtype_name((kl_dtype)d));
    if (!o) return PyErr_Format(PyExc_KeyError, "tracer_setup: no dtype %s", kl_dtype_name((kl_dtype)d));
    SET_REF(dtype_obj[d], Py_NewRef(o));
  }
  SET_REF(tracer_type, (PyTypeObject *)Py_NewRef(tt));
  SET_REF(scalar_fn, Py_NewRef(sf));
  SET_REF(unexpected_error, Py_NewRef(ue));
  Py_RETURN_NONE;
}

static PyMethodDef tracer_functions[] = {
    {"bind", (PyCFunction)(void (*)(void))mod_bind, METH_FASTCALL,
     "bind(prim, args, params=None) -> tuple of results (run eagerly, or recorded into a trace)"},
    {"trace_push", (PyCFunction)(void (*)(void))mod_trace_push, METH_FASTCALL, "trace_push(concrete=False) -> Trace"},
    {"trace_pop", mod_trace_pop, METH_O, "trace_pop(trace): ends the innermost trace"},
    {"current_trace", mod_current_trace, METH_NOARGS, "the innermost live Trace, or None"},
    {"tracing", mod_tracing, METH_NOARGS, "whether a trace is live"},
    {"tracer_setup", mod_tracer_setup, METH_VARARGS, "connects the trace binding to kiln's Python core"},
    {"set_bind_hook", mod_set_bind_hook, METH_O, "set_bind_hook(fn or None) -> the previous hook"},
    {"set_compile_time_eval", mod_set_compile_time_eval, METH_O,
     "set_compile_time_eval(on) -> previous: nullary primitives run now even under a trace"},
    {NULL, NULL, 0, NULL}};

int kl_py_tracer_init(PyObject *m) {
  value_hook_fn = value_hook;
  if (!prim_codes && !(prim_codes = PyDict_New())) return -1;
  ArrayBaseType = (PyTypeObject *)PyObject_GetAttrString(m, "ArrayBase");
  if (!ArrayBaseType) return -1;
  base_dealloc = (destructor)PyType_GetSlot(ArrayBaseType, Py_tp_dealloc);
  base_traverse = (traverseproc)PyType_GetSlot(ArrayBaseType, Py_tp_traverse);
  base_clear = (inquiry)PyType_GetSlot(ArrayBaseType, Py_tp_clear);
  fields_off = (kl_py_array_basicsize() + 7) & ~(Py_ssize_t)7;
  tracer_spec.basicsize = (int)(fields_off + (Py_ssize_t)sizeof(TracerFields));
  tracer_members[0].offset = fields_off + (Py_ssize_t)offsetof(TracerFields, trace);
  tracer_members[1].offset = fields_off + (Py_ssize_t)offsetof(TracerFields, cval);
  tracer_members[2].offset = fields_off + (Py_ssize_t)offsetof(TracerFields, vid);
  TracerBaseType = (PyTypeObject *)PyType_FromSpecWithBases(&tracer_spec, (PyObject *)ArrayBaseType);
  TraceType = (PyTypeObject *)PyType_FromSpec(&trace_spec);
  if (!TracerBaseType || !TraceType) return -1;
  Py_INCREF((PyObject *)TracerBaseType);
  Py_INCREF((PyObject *)TraceType);
  if (PyModule_AddObject(m, "TracerBase", (PyObject *)TracerBaseType) ||
      PyModule_AddObject(m, "Trace", (PyObject *)TraceType))
    return -1;
  return PyModule_AddFunctions(m, tracer_functions);
}
