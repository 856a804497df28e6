/* testing.c: test-only entry points into core routines that no public API reaches yet; tests/ call
 * them as kiln._kiln._test_*, nothing in the kiln package does. Each takes raw device pointers and
 * plain tuples, and raises the core's error as the other entry points do (kl_py_raise). */
#include "module.h"

#include <string.h>

#include "../../runtime/cudnn_sdpa.h"

/* desc = (b, hq, hkv, sq, skv, d, dtype name, causal, scale, q_stride, k_stride, v_stride, o_stride),
 * each stride a 4-tuple in (batch, head, seq, dim) order. 0, or -1 with an exception. */
static int parse_sdpa_desc(PyObject *t, kl_sdpa_desc *d) {
  const char *dtype;
  int causal;
  long long n[6], s[4][4];
  PyObject *st[4];
  memset(d, 0, sizeof *d);
  if (!PyArg_ParseTuple(t, "LLLLLLspfOOOO;desc: (b, hq, hkv, sq, skv, d, dtype, causal, scale, q_stride, k_stride, "
                           "v_stride, o_stride)",
                        &n[0], &n[1], &n[2], &n[3], &n[4], &n[5], &dtype, &causal, &d->scale, &st[0], &st[1], &st[2],
                        &st[3]))
    return -1;
  if (kl_dtype_from_name(dtype, &d->dtype)) {
    PyErr_Format(PyExc_TypeError, "_test_cudnn_sdpa: unknown dtype %s", dtype);
    return -1;
  }
  d->b = n[0], d->hq = n[1], d->hkv = n[2], d->sq = n[3], d->skv = n[4], d->d = n[5];
  d->causal = causal;
  int64_t *out[4] = {d->q_stride, d->k_stride, d->v_stride, d->o_stride};
  for (int i = 0; i < 4; i++) {
    PyObject *tup = PySequence_Tuple(st[i]);
    int ok = tup && PyArg_ParseTuple(tup, "LLLL;a stride is 4 ints", &s[i][0], &s[i][1], &s[i][2], &s[i][3]);
    Py_XDECREF(tup);
    if (!ok) return -1;
    for (int j = 0; j < 4; j++) out[i][j] = s[i][j];
  }
  return 0;
}

/* _test_cudnn_sdpa(direction, desc=None, ptrs=()): runtime/cudnn_sdpa.h from Python.
 *   "available"            -> (ok, why)
 *   "supported", desc      -> (ok, why): builds and caches both plans
 *   "work", desc           -> (forward work bytes, backward work bytes)
 *   "fwd", desc, (q, k, v, o, stats)                  -> None, once the run is queued
 *   "bwd", desc, (q, k, v, o, do, stats, dq, dk, dv)  -> None, once the run is queued
 * ptrs are device addresses (ints); the caller orders its reads after the run (kiln.block_until_ready
 * does not: the run writes memory behind kiln's back; _kiln.synchronize() does). */
static PyObject *mod_test_cudnn_sdpa(PyObject *self, PyObject *args) {
  (void)self;
  const char *dir;
  PyObject *desc = NULL, *ptrs = NULL;
  if (!PyArg_ParseTuple(args, "s|OO", &dir, &desc, &ptrs)) return NULL;
  char err[4096] = "";
  if (!strcmp(dir, "available")) {
    int ok;
    Py_BEGIN_ALLOW_THREADS
    ok = kl_cudnn_sdpa_available(err, sizeof err);
    Py_END_ALLOW_THREADS
    return Py_BuildValue("(Os)", ok ? Py_True : Py_False, ok ? "" : err);
  }
  kl_sdpa_desc d;
  if (!desc) return PyErr_Format(PyExc_TypeError, "_test_cudnn_sdpa(%s): needs a desc", dir);
  if (parse_sdpa_desc(desc, &d)) return NULL;
  if (!strcmp(dir, "supported")) {
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = kl_cudnn_sdpa_supported(&d, err, sizeof err);
    Py_END_ALLOW_THREADS
    kl_status_clear();
    return Py_BuildValue("(Os)", rc ? Py_False : Py_True, rc ? err : "");
  }
  if (!strcmp(dir, "work")) {
    int64_t f, b = -1;
    Py_BEGIN_ALLOW_THREADS
    f = kl_cudnn_sdpa_work_bytes(&d, 0, err, sizeof err);
    if (f >= 0) b = kl_cudnn_sdpa_work_bytes(&d, 1, err, sizeof err);
    Py_END_ALLOW_THREADS
    if (f < 0 || b < 0) return kl_py_raise("_test_cudnn_sdpa: ", err);
    return Py_BuildValue("(LL)", (long long)f, (long long)b);
  }
  int bwd = !strcmp(dir, "bwd");
  if (!bwd && strcmp(dir, "fwd"))
    return PyErr_Format(PyExc_ValueError, "_test_cudnn_sdpa: direction %s is not available, supported, work, fwd or bwd", dir);
  PyObject *t = ptrs ? PySequence_Tuple(ptrs) : NULL;
  Py_ssize_t want = bwd ? 9 : 5;
  if (!t || PyTuple_Size(t) != want) {
    Py_XDECREF(t);
    return PyErr_Format(PyExc_TypeError, "_test_cudnn_sdpa(%s): ptrs must be %zd device addresses", dir, want);
  }
  void *p[9];
  for (Py_ssize_t i = 0; i < want; i++) {
    unsigned long long u = PyLong_AsUnsignedLongLong(PyTuple_GetItem(t, i));
    if (PyErr_Occurred()) {
      Py_DECREF(t);
      return NULL;
    }
    p[i] = (void *)(uintptr_t)u;
  }
  Py_DECREF(t);
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = bwd ? kl_cudnn_sdpa_bwd(&d, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], err, sizeof err)
           : kl_cudnn_sdpa_fwd(&d, p[0], p[1], p[2], p[3], p[4], err, sizeof err);
  Py_END_ALLOW_THREADS
  if (rc) return kl_py_raise("_test_cudnn_sdpa: ", err);
  Py_RETURN_NONE;
}

static PyMethodDef testing_methods[] = {
    {"_test_cudnn_sdpa", mod_test_cudnn_sdpa, METH_VARARGS,
     "_test_cudnn_sdpa(direction, desc, ptrs): runtime/cudnn_sdpa.h's entry points over raw device pointers (tests only)"},
    {NULL, NULL, 0, NULL}};

int kl_py_testing_init(PyObject *m) { return PyModule_AddFunctions(m, testing_methods); }
