/* profiler.c: the C half of kiln.profiler: starting and stopping the runtime's host-event recorder
 * (runtime/profile.h) and CUPTI's device collection (runtime/cupti.h), recording the Python side's
 * events (jit traces, annotations, named scopes) into the same recorder, and handing both kinds of
 * records to Python, which writes the trace file. */
#include "module.h"

#include <stdlib.h>
#include <string.h>

/* Categories Python may record under (the recorder keeps a static string per event). */
static const char *const py_cats[] = {"annotation", "step", "named_scope", "trace", "python"};

static const char *py_cat(const char *s) {
  for (size_t i = 0; i < sizeof py_cats / sizeof py_cats[0]; i++)
    if (!strcmp(s, py_cats[i])) return py_cats[i];
  return "python";
}

void kl_py_prof_compile(const kl_exec *x, const kl_program *pg, uint64_t t0) {
  if (!x) {
    kl_prof_add("compile", "program", t0, kl_prof_now(), 0, "\"equations\": %d, \"failed\": true", pg->neqns);
    return;
  }
  int libs = 0;
  for (int s = 0; s < x->nsteps; s++) libs += x->steps[s].is_library;
  kl_prof_add("compile", x->name[0] ? x->name : "program", t0, kl_prof_now(), 0,
              "\"equations\": %d, \"steps\": %d, \"library_calls\": %d, \"device\": \"%s\", \"slots\": %d",
              pg->neqns, x->nsteps, libs, x->device == KL_DEV_CUDA ? "cuda" : "cpu", x->nslots);
}

/* trace_start(): the recorder on (RuntimeError when it is already). */
static PyObject *trace_start(PyObject *self, PyObject *unused) {
  (void)self, (void)unused;
  if (kl_prof_start()) return PyErr_Format(PyExc_RuntimeError, "a profile is already being recorded");
  Py_RETURN_NONE;
}

static PyObject *trace_stop(PyObject *self, PyObject *unused) {
  (void)self, (void)unused;
  kl_prof_stop();
  Py_RETURN_NONE;
}

static PyObject *trace_now(PyObject *self, PyObject *unused) {
  (void)self, (void)unused;
  return PyLong_FromUnsignedLongLong(kl_prof_now());
}

/* trace_begin() -> now while recording, else 0 (what Python's hooks test). */
static PyObject *trace_begin(PyObject *self, PyObject *unused) {
  (void)self, (void)unused;
  return PyLong_FromUnsignedLongLong(kl_prof_begin());
}

/* trace_add(cat, name, t0, args=None): an event from t0 to now on this thread; args: the members
 * of a JSON object, as text. */
static PyObject *trace_add(PyObject *self, PyObject *args) {
  (void)self;
  const char *cat, *name, *json = NULL;
  unsigned long long t0;
  if (!PyArg_ParseTuple(args, "ssK|z:trace_add", &cat, &name, &t0, &json)) return NULL;
  if (t0) kl_prof_add(py_cat(cat), name, t0, kl_prof_now(), 0, json ? "%s" : NULL, json);
  Py_RETURN_NONE;
}

static PyObject *str_of(const char *s) { return PyUnicode_DecodeUTF8(s, (Py_ssize_t)strlen(s), "replace"); }

/* trace_take() -> ([(cat, name, t0, t1, tid, id, args), ...], dropped): what was recorded, in
 * recording order; the recorder is left empty. */
static PyObject *trace_take(PyObject *self, PyObject *unused) {
  (void)self, (void)unused;
  size_t n, dropped;
  kl_prof_event *e = kl_prof_take(&n, &dropped);
  PyObject *list = PyList_New((Py_ssize_t)n);
  for (size_t i = 0; list && i < n; i++) {
    PyObject *cat = str_of(e[i].cat), *name = str_of(e[i].name), *a = str_of(e[i].args);
    PyObject *t = cat && name && a ? Py_BuildValue("(OOKKiKO)", cat, name, (unsigned long long)e[i].t0,
                                                   (unsigned long long)e[i].t1, e[i].tid,
                                                   (unsigned long long)e[i].id, a)
                                   : NULL;
    Py_XDECREF(cat), Py_XDECREF(name), Py_XDECREF(a);
    if (!t) Py_CLEAR(list);
    else PyList_SetItem(list, (Py_ssize_t)i, t);
  }
  free(e);
  if (!list) return NULL;
  return Py_BuildValue("(Nn)", list, (Py_ssize_t)dropped);
}

/* device_trace_start() -> None when CUPTI collects from now on, else why not (a str). */
static PyObject *device_trace_start(PyObject *self, PyObject *unused) {
  (void)self, (void)unused;
  char why[600];
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = kl_cupti_start(why, sizeof why);
  Py_END_ALLOW_THREADS
  if (rc) return str_of(why);
  Py_RETURN_NONE;
}

static PyObject *device_trace_stop(PyObject *self, PyObject *unused) {
  (void)self, (void)unused;
  Py_BEGIN_ALLOW_THREADS
  kl_cupti_stop();
  Py_END_ALLOW_THREADS
  Py_RETURN_NONE;
}

/* device_trace_take() -> ([(kind, name, start, end, device, stream, correlation, launch, bytes,
 * copy_kind, grid, block), ...], dropped), kind "kernel", "memcpy" or "memset"; the store is left
 * empty. */
static PyObject *device_trace_take(PyObject *self, PyObject *unused) {
  (void)self, (void)unused;
  static const char *const kinds[] = {"kernel", "memcpy", "memset"};
  size_t n, dropped;
  kl_cupti_record *r;
  Py_BEGIN_ALLOW_THREADS
  r = kl_cupti_take(&n, &dropped);
  Py_END_ALLOW_THREADS
  PyObject *list = PyList_New((Py_ssize_t)n);
  for (size_t i = 0; list && i < n; i++) {
    const kl_cupti_record *c = &r[i];
    PyObject *name = str_of(c->name);
    PyObject *t = name ? Py_BuildValue("(sOKKIIIKKi(iii)(iii))", kinds[c->kind], name, (unsigned long long)c->start,
                                       (unsigned long long)c->end, c->device, c->stream, c->correlation,
                                       (unsigned long long)c->launch, (unsigned long long)c->bytes, c->copy_kind,
                                       c->grid[0], c->grid[1], c->grid[2], c->block[0], c->block[1], c->block[2])
                       : NULL;
    Py_XDECREF(name);
    if (!t) Py_CLEAR(list);
    else PyList_SetItem(list, (Py_ssize_t)i, t);
  }
  free(r);
  if (!list) return NULL;
  return Py_BuildValue("(Nn)", list, (Py_ssize_t)dropped);
}

static PyObject *cupti_library(PyObject *self, PyObject *unused) {
  (void)self, (void)unused;
  return str_of(kl_cupti_library());
}

static PyMethodDef profiler_methods[] = {
    {"trace_start", trace_start, METH_NOARGS, "the profiler's host-event recorder on"},
    {"trace_stop", trace_stop, METH_NOARGS, "the recorder off (its events kept until trace_take)"},
    {"trace_now", trace_now, METH_NOARGS, "now in the profiler's clock (CLOCK_MONOTONIC ns)"},
    {"trace_begin", trace_begin, METH_NOARGS, "now while the recorder is on, else 0"},
    {"trace_add", trace_add, METH_VARARGS, "trace_add(cat, name, t0, args=None): an event from t0 to now"},
    {"trace_take", trace_take, METH_NOARGS, "([(cat, name, t0, t1, tid, id, args)], dropped)"},
    {"device_trace_start", device_trace_start, METH_NOARGS, "CUPTI collection on: None, or why not"},
    {"device_trace_stop", device_trace_stop, METH_NOARGS, "CUPTI collection off (buffers flushed)"},
    {"device_trace_take", device_trace_take, METH_NOARGS, "([(kind, name, start, end, device, stream, correlation, "
                                                          "launch, bytes, copy_kind, grid, block)], dropped)"},
    {"cupti_library", cupti_library, METH_NOARGS, "the libcupti opened, or ''"},
    {NULL, NULL, 0, NULL}};

int kl_py_profiler_init(PyObject *module) { return PyModule_AddFunctions(module, profiler_methods); }
