/* module.c: kiln._kiln, the CPython extension (stable ABI 3.11). It wraps the C core for the
 * Python package: Buffer (a device buffer), Builder (a Program under construction),
 * Executable (a compiled Program); array.c adds ArrayBase, the C half of kiln.Array. Python
 * refcounts stop here. */
#include "module.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>

#include "../../include/kiln.h"

/* Where new buffers and compiled programs go: KL_DEV_CUDA once python/ chose the GPU. */
static int default_device = KL_DEV_CPU;

/* The GPU's device table (always there; its available() says whether a GPU is usable). */
static const kl_device *gpu(void) { return kl_device_get(KL_DEV_CUDA); }

typedef struct {
  PyObject_HEAD
  kl_program *pg;
} BuilderObject;

PyObject *BufferType, *ExecType;
static PyObject *BuilderType;

/* ---- Buffer ---- */

PyObject *buffer_new_from(kl_buffer *b) {
  BufferObject *o = (BufferObject *)PyType_GenericNew((PyTypeObject *)BufferType, NULL, NULL);
  if (!o) {
    kl_buf_release(b);
    return NULL;
  }
  o->buf = b;
  atomic_fetch_add((_Atomic int *)&b->holders, 1);
  return (PyObject *)o;
}

/* kiln.errors.JaxRuntimeError (a RuntimeError, as JAX's jax.errors.JaxRuntimeError): a computation
 * that failed to compile or run. Looked up once; RuntimeError if kiln.errors cannot say. */
static PyObject *runtime_error(void) {
  static PyObject *cls;
  if (cls) return cls;
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyObject *mod = PyImport_ImportModule("kiln.errors");
  PyObject *c = mod ? PyObject_GetAttrString(mod, "JaxRuntimeError") : NULL;
  Py_XDECREF(mod);
  PyErr_Restore(type, value, tb);
  if (c && PyType_Check(c) && PyObject_IsSubclass(c, PyExc_RuntimeError) == 1) cls = c;
  else Py_XDECREF(c);
  return cls ? cls : PyExc_RuntimeError;
}

static void buffer_dealloc(PyObject *self) {
  BufferObject *o = (BufferObject *)self;
  if (o->buf) atomic_fetch_sub((_Atomic int *)&o->buf->holders, 1);
  kl_buf_release(o->buf);
  free(o->host);
  PyTypeObject *tp = Py_TYPE(self);
  freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
  f(self);
  Py_DECREF(tp);
}

/* Waits for the buffer; raises if its computation failed. The wait looks for Ctrl-C every 100 ms
 * (where the device can bound a wait: the CPU, CUDA): a KeyboardInterrupt asks the loops running to stop
 * (they fail at their next trip), waits for b to settle, clears the request and raises. */
static int buffer_wait(kl_buffer *b) {
  int st;
  if (kl_buf_is_ready(b)) st = b->state;
  else
    for (;;) {
      Py_BEGIN_ALLOW_THREADS
      st = kl_buf_wait_for(b, 0.1);
      Py_END_ALLOW_THREADS
      if (st != KL_BUF_PENDING) break;
      if (PyErr_CheckSignals()) {
        kl_rt_stop_request();
        Py_BEGIN_ALLOW_THREADS
        kl_buf_wait(b);
        Py_END_ALLOW_THREADS
        kl_rt_stop_clear();
        return -1;
      }
    }
  if (st == KL_BUF_FAILED) {
    PyErr_SetString(runtime_error(), b->error ? b->error : "kiln: the computation producing this array failed");
    return -1;
  }
  return 0;
}

int kl_py_wait_callbacks(const kl_exec *x, kl_buffer **outs, int nout) {
  if (!x->callbacks || x->device != KL_DEV_CPU) return 0;
  for (int i = 0; i < nout; i++) /* (interruptible; a failed output raises its error) */
    if (buffer_wait(outs[i])) {
      for (int j = 0; j < nout; j++) { /* the call fails: its outputs are dropped */
        kl_buf_release(outs[j]);
        outs[j] = NULL;
      }
      return -1;
    }
  Py_BEGIN_ALLOW_THREADS kl_exec_wait_callbacks(x); /* callbacks after the last output's step */
  Py_END_ALLOW_THREADS
  return 0;
}

/* The bytes of a GPU buffer come to the host once (waiting only for the launch that writes
 * them); the host copy lives as long as the Buffer. */
/* Makes buffer b usable by a consumer: stream None waits for it; an int stream handle (1 and 2
 * name CUDA's legacy and per-thread default streams) is made to wait on the GPU; -1 skips. */
static int buffer_wait_or_order(kl_buffer *b, PyObject *stream) {
  if (stream == Py_None || b->device == KL_DEV_CPU) return buffer_wait(b);
  long long h = PyLong_AsLongLong(stream);
  if (h == -1 && PyErr_Occurred()) return -1;
  if (h == -1) return 0;
  if (kl_device_get(b->device)->stream_wait((void *)(uintptr_t)h, b)) {
    PyErr_SetString(PyExc_RuntimeError, "__dlpack__: cannot order the consumer's stream after kiln's");
    return -1;
  }
  return 0;
}

static int buffer_getbuffer(PyObject *self, Py_buffer *view, int flags) {
  BufferObject *o = (BufferObject *)self;
  if (buffer_wait(o->buf)) return -1;
  if (o->buf->device == KL_DEV_CPU)
    return PyBuffer_FillInfo(view, self, o->buf->data, (Py_ssize_t)o->buf->nbytes, 1, flags);
  if (!o->host) {
    char err[512];
    void *h = malloc(o->buf->nbytes ? o->buf->nbytes : 1);
    if (!h) {
      PyErr_Format(PyExc_MemoryError, "cannot allocate %zu host bytes to read a GPU array", o->buf->nbytes);
      return -1;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = kl_device_get(o->buf->device)->read(h, o->buf, err, sizeof err);
    Py_END_ALLOW_THREADS
    if (rc) {
      free(h);
      PyErr_SetString(PyExc_RuntimeError, err);
      return -1;
    }
    o->host = h;
  }
  return PyBuffer_FillInfo(view, self, o->host, (Py_ssize_t)o->buf->nbytes, 1, flags);
}

static void buffer_releasebuffer(PyObject *self, Py_buffer *view) {
  (void)self;
  (void)view;
}

static PyObject *buffer_block(PyObject *self, PyObject *unused) {
  (void)unused;
  if (buffer_wait(((BufferObject *)self)->buf)) return NULL;
  Py_RETURN_NONE;
}

static PyObject *buffer_is_ready(PyObject *self, PyObject *unused) {
  (void)unused;
  return PyBool_FromLong(kl_buf_is_ready(((BufferObject *)self)->buf));
}

static PyObject *buffer_nbytes(PyObject *self, void *unused) {
  (void)unused;
  return PyLong_FromSize_t(((BufferObject *)self)->buf->nbytes);
}

static PyObject *buffer_device(PyObject *self, void *unused) {
  (void)unused;
  return PyLong_FromLong(((BufferObject *)self)->buf->device);
}

static PyObject *buffer_ordinal(PyObject *self, void *unused) {
  (void)unused;
  return PyLong_FromLong(((BufferObject *)self)->buf->ordinal);
}

static PyObject *buffer_committed(PyObject *self, void *unused) {
  (void)unused;
  return PyBool_FromLong(((BufferObject *)self)->buf->committed);
}

static PyObject *buffer_ptr(PyObject *self, void *unused) {
  (void)unused;
  return PyLong_FromVoidPtr(((BufferObject *)self)->buf->data);
}

static PyMethodDef buffer_methods[] = {
    {"block_until_ready", buffer_block, METH_NOARGS, "Wait until the data is computed."},
    {"is_ready", buffer_is_ready, METH_NOARGS, "True once the data is computed."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef buffer_getset[] = {
    {"nbytes", buffer_nbytes, NULL, "size in bytes", NULL},
    {"ptr", buffer_ptr, NULL, "address of the data (for tests)", NULL},
    {"device", buffer_device, NULL, "0: host memory, 1: GPU memory", NULL},
    {"ordinal", buffer_ordinal, NULL, "which device of its kind it is on", NULL},
    {"committed", buffer_committed, NULL, "placed on its device by the user (computations follow it)", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyType_Slot buffer_slots[] = {
    {Py_tp_dealloc, buffer_dealloc},           {Py_tp_methods, buffer_methods},
    {Py_tp_getset, buffer_getset},             {Py_bf_getbuffer, buffer_getbuffer},
    {Py_bf_releasebuffer, buffer_releasebuffer}, {Py_tp_doc, "A kiln device buffer."},
    {0, NULL}};

static PyType_Spec buffer_spec = {"kiln._kiln.Buffer", sizeof(BufferObject), 0, Py_TPFLAGS_DEFAULT, buffer_slots};

/* from_buffer(obj, device=default) -> Buffer: copies the bytes of any C-contiguous
 * buffer-protocol object to a device. */
static PyObject *mod_from_buffer(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *arg;
  int device = default_device;
  if (!PyArg_ParseTuple(args, "O|i", &arg, &device)) return NULL;
  if (device < 0) device = default_device;
  Py_buffer view;
  if (PyObject_GetBuffer(arg, &view, PyBUF_C_CONTIGUOUS) < 0) return NULL;
  char err[512];
  kl_buffer *b = kl_buf_new_on(device, (size_t)view.len, err, sizeof err);
  if (!b) {
    PyBuffer_Release(&view);
    return PyErr_Format(PyExc_MemoryError, "device_put: %s", err);
  }
  int rc = 0;
  if (device == KL_DEV_CPU) memcpy(b->data, view.buf, (size_t)view.len);
  else {
    Py_BEGIN_ALLOW_THREADS
    rc = kl_device_get(device)->upload(b->data, view.buf, (size_t)view.len, err, sizeof err);
    Py_END_ALLOW_THREADS
  }
  b->state = KL_BUF_READY;
  PyBuffer_Release(&view);
  if (rc) {
    kl_buf_release(b);
    return PyErr_Format(PyExc_RuntimeError, "device_put: %s", err);
  }
  return buffer_new_from(b);
}

/* A copy of buffer b on `device` (in stream order; GPU-to-host waits for the data). */
static kl_buffer *transfer(kl_buffer *b, int device, char *err, size_t errlen) {
  kl_buffer *n = kl_buf_new_on(device, b->nbytes, err, errlen);
  if (!n) return NULL;
  int rc = 0;
  if (device == KL_DEV_CPU) rc = kl_device_get(b->device)->read(n->data, b, err, errlen); /* host is the hub */
  else if (b->device != KL_DEV_CPU) {
    snprintf(err, errlen, "internal error: no copy from device %d to device %d", b->device, device);
    rc = -1;
  } else if (kl_buf_wait(b) == KL_BUF_FAILED) {
    snprintf(err, errlen, "%s", b->error ? b->error : "the computation producing this array failed");
    rc = -1;
  } else rc = kl_device_get(device)->upload(n->data, b->data, b->nbytes, err, errlen);
  n->state = KL_BUF_READY;
  if (rc) {
    kl_buf_release(n);
    return NULL;
  }
  return n;
}

static PyObject *mod_transfer(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *bo;
  int device, ordinal = -1;
  if (!PyArg_ParseTuple(args, "Oi|i", &bo, &device, &ordinal)) return NULL;
  if (!PyObject_TypeCheck(bo, (PyTypeObject *)BufferType)) return PyErr_Format(PyExc_TypeError, "transfer: not a Buffer");
  kl_buffer *b = ((BufferObject *)bo)->buf;
  /* ordinal < 0: the device kind alone (uncommitted); else committed to that device of the kind */
  if (b->device == device && (ordinal < 0 || (b->committed && b->ordinal == ordinal))) {
    Py_INCREF(bo);
    return bo;
  }
  char err[512];
  kl_buffer *n;
  const kl_device *d = kl_device_get(device);
  if (!d) return PyErr_Format(PyExc_ValueError, "transfer: no device kind %d", device);
  Py_BEGIN_ALLOW_THREADS
  /* a kind with several real devices (GPUs): allocate on the one asked for, copy between them */
  int old = d->use_ordinal && ordinal >= 0 ? d->use_ordinal(ordinal) : -1;
  if (d->copy && b->device == device) {
    n = kl_buf_new_on(device, b->nbytes, err, sizeof err);
    if (n && d->copy(n, b, err, sizeof err)) {
      kl_buf_release(n);
      n = NULL;
    }
  } else n = transfer(b, device, err, sizeof err);
  if (old >= 0) d->use_ordinal(old);
  Py_END_ALLOW_THREADS
  if (!n) return kl_py_raise("device_put: ", err);
  if (ordinal >= 0) {
    n->ordinal = ordinal;
    n->committed = 1;
  }
  return buffer_new_from(n);
}

/* ---- DLPack: zero-copy exchange with NumPy, PyTorch, CuPy (legacy DLManagedTensor ABI) ---- */

typedef struct {
  int32_t device_type; /* 1: CPU, 2: CUDA */
  int32_t device_id;
} DLDevice;
typedef struct {
  uint8_t code; /* 0 int, 1 uint, 2 float, 4 bfloat, 6 bool */
  uint8_t bits;
  uint16_t lanes;
} DLDataType;
typedef struct {
  void *data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t *shape;
  int64_t *strides;
  uint64_t byte_offset;
} DLTensor;
typedef struct DLManagedTensor {
  DLTensor dl_tensor;
  void *manager_ctx;
  void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;

typedef struct {
  DLManagedTensor m;
  kl_buffer *buf; /* one reference, dropped by the deleter */
  int64_t shape[KL_MAX_RANK];
} kl_dlpack_export;

static void export_deleter(DLManagedTensor *self) {
  kl_dlpack_export *x = (kl_dlpack_export *)self;
  kl_buf_release(x->buf);
  free(x);
}

static void capsule_destructor(PyObject *cap) {
  if (PyCapsule_IsValid(cap, "dltensor")) { /* never consumed */
    DLManagedTensor *m = PyCapsule_GetPointer(cap, "dltensor");
    if (m && m->deleter) m->deleter(m);
  }
}

/* to_dlpack(buffer, shape, (code, bits), stream) -> capsule. stream: None (wait for the data),
 * -1 (no ordering), or a consumer CUDA stream handle that is made to wait for it. */
static PyObject *mod_to_dlpack(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *bo, *shape, *stream;
  int code, bits;
  if (!PyArg_ParseTuple(args, "OO(ii)O", &bo, &shape, &code, &bits, &stream)) return NULL;
  if (!PyObject_TypeCheck(bo, (PyTypeObject *)BufferType)) return PyErr_Format(PyExc_TypeError, "to_dlpack: not a Buffer");
  kl_buffer *b = ((BufferObject *)bo)->buf;
  b->shared = 1; /* the consumer may write it: no eager work may still be waiting to read it */
  if (kl_py_eager_flush()) return NULL;
  if (buffer_wait_or_order(b, stream)) return NULL;
  kl_dlpack_export *x = calloc(1, sizeof *x);
  if (!x) return PyErr_NoMemory();
  Py_ssize_t nd = PyTuple_Size(shape);
  for (Py_ssize_t i = 0; i < nd && i < KL_MAX_RANK; i++) x->shape[i] = PyLong_AsLongLong(PyTuple_GetItem(shape, i));
  x->buf = b;
  kl_buf_retain(b);
  x->m.dl_tensor.data = b->data;
  x->m.dl_tensor.device.device_type = b->device == KL_DEV_CUDA ? 2 : 1;
  x->m.dl_tensor.ndim = (int32_t)nd;
  x->m.dl_tensor.dtype.code = (uint8_t)code;
  x->m.dl_tensor.dtype.bits = (uint8_t)bits;
  x->m.dl_tensor.dtype.lanes = 1;
  x->m.dl_tensor.shape = x->shape;
  x->m.dl_tensor.strides = NULL; /* C-contiguous */
  x->m.deleter = export_deleter;
  PyObject *cap = PyCapsule_New(&x->m, "dltensor", capsule_destructor);
  if (!cap) export_deleter(&x->m);
  return cap;
}

typedef struct {
  DLManagedTensor *m;
  int device;
} kl_dlpack_import;

static void import_release(void *owner) {
  kl_dlpack_import *im = owner;
  /* kiln's queued reads finish before the owner reuses it (the CPU's finish before its last
   * reference goes, and its executor may be the one dropping it: no synchronize there) */
  if (im->device != KL_DEV_CPU) kl_device_get(im->device)->synchronize();
  if (im->m->deleter) im->m->deleter(im->m);
  free(im);
}

/* from_dlpack(capsule) -> (Buffer, shape, (code, bits)) without copying, or None when the
 * tensor cannot be used in place (strided, misaligned for kiln's GPU kernels, another GPU):
 * the caller copies then. */
static PyObject *mod_from_dlpack(PyObject *self, PyObject *cap) {
  (void)self;
  DLManagedTensor *m = PyCapsule_GetPointer(cap, "dltensor");
  if (!m) return NULL;
  DLTensor *t = &m->dl_tensor;
  int dev = t->device.device_type == 1 || t->device.device_type == 3 ? KL_DEV_CPU
            : t->device.device_type == 2 && t->device.device_id == 0 && gpu()->available(NULL, 0) ? KL_DEV_CUDA
                                                                                                     : -1;
  int64_t n = 1, expect = 1;
  int contiguous = 1;
  for (int i = t->ndim - 1; i >= 0; i--) {
    if (t->strides && t->shape[i] != 1 && t->strides[i] != expect) contiguous = 0;
    expect *= t->shape[i];
    n *= t->shape[i];
  }
  char *data = (char *)t->data + t->byte_offset;
  if (dev < 0 || !contiguous || t->dtype.lanes != 1 || (dev == KL_DEV_CUDA && ((uintptr_t)data & 15)))
    Py_RETURN_NONE;
  size_t nbytes = (size_t)n * (t->dtype.bits / 8 ? t->dtype.bits / 8 : 1);
  kl_dlpack_import *im = malloc(sizeof *im);
  if (!im) return PyErr_NoMemory();
  im->m = m;
  im->device = dev;
  kl_buffer *b = kl_buf_wrap(data, nbytes, import_release, im);
  if (!b) {
    free(im);
    return PyErr_NoMemory();
  }
  b->device = dev;
  b->shared = 1;
  if (PyCapsule_SetName(cap, "used_dltensor")) {
    kl_buf_release(b);
    return NULL;
  }
  PyObject *shape = PyTuple_New(t->ndim);
  for (int i = 0; i < t->ndim; i++) PyTuple_SetItem(shape, i, PyLong_FromLongLong(t->shape[i]));
  PyObject *buf = buffer_new_from(b);
  if (!buf) {
    Py_DECREF(shape);
    return NULL;
  }
  return Py_BuildValue("(NN(ii))", buf, shape, (int)t->dtype.code, (int)t->dtype.bits);
}

static PyObject *mod_stream_handle(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  return PyLong_FromVoidPtr(gpu()->stream());
}

/* ---- Builder ---- */

static PyObject *builder_new(PyTypeObject *tp, PyObject *args, PyObject *kw) {
  (void)args;
  (void)kw;
  BuilderObject *o = (BuilderObject *)PyType_GenericNew(tp, NULL, NULL);
  if (o && !(o->pg = kl_program_new())) {
    Py_DECREF(o);
    return PyErr_NoMemory();
  }
  return (PyObject *)o;
}

static void builder_dealloc(PyObject *self) {
  kl_program_free(((BuilderObject *)self)->pg);
  PyTypeObject *tp = Py_TYPE(self);
  freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
  f(self);
  Py_DECREF(tp);
}

static int parse_dtype(PyObject *o, kl_dtype *out) {
  const char *s = PyUnicode_AsUTF8AndSize(o, NULL);
  if (!s) return -1;
  if (kl_dtype_from_name(s, out)) {
    PyErr_Format(PyExc_TypeError, "kiln does not support dtype %s", s);
    return -1;
  }
  return 0;
}

static int parse_shape(PyObject *seq, int64_t *dims, int *ndim, const char *what) {
  PyObject *fast = PySequence_Tuple(seq);
  if (!fast) return -1;
  Py_ssize_t n = PyTuple_Size(fast);
  if (n > KL_MAX_RANK) {
    Py_DECREF(fast);
    PyErr_Format(PyExc_ValueError, "%s: rank %zd exceeds kiln's maximum rank %d", what, n, KL_MAX_RANK);
    return -1;
  }
  for (Py_ssize_t i = 0; i < n; i++) {
    long long v = PyLong_AsLongLong(PyTuple_GetItem(fast, i));
    if (v == -1 && PyErr_Occurred()) {
      Py_DECREF(fast);
      return -1;
    }
    dims[i] = v;
  }
  *ndim = (int)n;
  Py_DECREF(fast);
  return 0;
}

static PyObject *aval_tuple(const kl_aval *a, int vid) {
  PyObject *shape = PyTuple_New(a->ndim);
  for (int i = 0; i < a->ndim; i++) PyTuple_SetItem(shape, i, PyLong_FromLongLong(a->dims[i]));
  return Py_BuildValue("(iNsO)", vid, shape, kl_dtype_name(a->dtype), a->weak ? Py_True : Py_False);
}

/* add_input(shape, dtype, weak) -> value id */
static PyObject *builder_add_input(PyObject *self, PyObject *args) {
  PyObject *shape, *dt;
  int weak;
  if (!PyArg_ParseTuple(args, "OOp", &shape, &dt, &weak)) return NULL;
  kl_aval a;
  memset(&a, 0, sizeof a);
  int nd;
  if (parse_shape(shape, a.dims, &nd, "input") || parse_dtype(dt, &a.dtype)) return NULL;
  a.ndim = (int8_t)nd;
  a.weak = (uint8_t)weak;
  int vid = kl_program_add_input(((BuilderObject *)self)->pg, &a);
  if (vid < 0) return PyErr_NoMemory();
  return PyLong_FromLong(vid);
}

/* Fills p from a dict of named params, checked against the primitive's named fields. Vectors
 * are stored in `store` (64 entries per field, at most 8 vector fields); program fields take a
 * Builder (borrowed: the equation that receives these params retains the program). */
static int parse_params(kl_prim prim, PyObject *dict, kl_params *p, int64_t store[8][64]) {
  kl_params_init(p, prim);
  if (!dict || dict == Py_None) return 0;
  PyObject *key, *val;
  Py_ssize_t pos = 0;
  int nvec = 0;
  const char *pname = kl_prim_get(prim)->name;
  while (PyDict_Next(dict, &pos, &key, &val)) {
    const char *name = PyUnicode_AsUTF8AndSize(key, NULL);
    if (!name) return -1;
    const kl_param_field *f = kl_prim_param(prim, name);
    if (!f) {
      PyErr_Format(PyExc_TypeError, "%s: unknown parameter %s", pname, name);
      return -1;
    }
    void *at = kl_param_ptr(p, f);
    switch (f->kind) {
    case KL_PF_IVEC: {
      PyObject *t = PySequence_Tuple(val);
      if (!t) return -1;
      Py_ssize_t m = PyTuple_Size(t);
      if (m > 64 || nvec == 8) {
        Py_DECREF(t);
        PyErr_Format(PyExc_ValueError, "%s: parameter %s too long", pname, name);
        return -1;
      }
      int64_t *dst = store[nvec++];
      for (Py_ssize_t i = 0; i < m; i++) {
        dst[i] = PyLong_AsLongLong(PyTuple_GetItem(t, i));
        if (dst[i] == -1 && PyErr_Occurred()) {
          Py_DECREF(t);
          return -1;
        }
      }
      Py_DECREF(t);
      *(kl_ivec *)at = (kl_ivec){dst, (int)m};
      break;
    }
    case KL_PF_INT: case KL_PF_INT32: case KL_PF_LOC: case KL_PF_HINT: {
      long long v = PyLong_AsLongLong(val);
      if (v == -1 && PyErr_Occurred()) return -1;
      if (f->kind == KL_PF_INT) *(int64_t *)at = v;
      else *(int *)at = (int)v;
      break;
    }
    case KL_PF_FLOAT: case KL_PF_FLOAT_NZ: {
      double v = PyFloat_AsDouble(val);
      if (v == -1.0 && PyErr_Occurred()) return -1;
      *(double *)at = v;
      break;
    }
    case KL_PF_DTYPE: {
      kl_dtype d;
      if (val == Py_None) *(int *)at = -1;
      else if (parse_dtype(val, &d)) return -1;
      else *(int *)at = (int)d;
      break;
    }
    case KL_PF_PROGRAM:
      if (!PyObject_TypeCheck(val, (PyTypeObject *)BuilderType)) {
        PyErr_Format(PyExc_TypeError, "%s: parameter %s must be a program (a Builder)", pname, name);
        return -1;
      }
      *(kl_program **)at = ((BuilderObject *)val)->pg;
      break;
    }
  }
  return 0;
}

/* add_eqn(prim, ins, params) -> tuple of (vid, shape, dtype, weak) */
static PyObject *builder_add_eqn(PyObject *self, PyObject *args) {
  const char *pname;
  PyObject *ins, *params;
  if (!PyArg_ParseTuple(args, "sOO", &pname, &ins, &params)) return NULL;
  kl_prim prim;
  if (kl_prim_from_name(pname, &prim)) return PyErr_Format(PyExc_ValueError, "unknown primitive %s", pname);
  kl_params p;
  static int64_t store[8][64];
  if (parse_params(prim, params, &p, store)) return NULL;
  PyObject *t = PySequence_Tuple(ins);
  if (!t) return NULL;
  Py_ssize_t n = PyTuple_Size(t);
  int *iv = PyMem_Malloc(sizeof(int) * (size_t)(n + 1));
  for (Py_ssize_t i = 0; i < n; i++) iv[i] = (int)PyLong_AsLong(PyTuple_GetItem(t, i));
  Py_DECREF(t);
  if (PyErr_Occurred()) {
    PyMem_Free(iv);
    return NULL;
  }
  int outs[KL_MAX_OUTS], nout;
  char err[1024];
  kl_program *pg = ((BuilderObject *)self)->pg;
  int rc = kl_program_add_eqn(pg, prim, iv, (int)n, &p, outs, &nout, err, sizeof err);
  PyMem_Free(iv);
  if (rc) return kl_py_raise(NULL, err);
  PyObject *res = PyTuple_New(nout);
  for (int i = 0; i < nout; i++) PyTuple_SetItem(res, i, aval_tuple(&pg->vals[outs[i]].aval, outs[i]));
  return res;
}

static PyObject *builder_set_outputs(PyObject *self, PyObject *arg) {
  PyObject *t = PySequence_Tuple(arg);
  if (!t) return NULL;
  Py_ssize_t n = PyTuple_Size(t);
  int *ov = PyMem_Malloc(sizeof(int) * (size_t)(n + 1));
  kl_program *pg = ((BuilderObject *)self)->pg;
  for (Py_ssize_t i = 0; i < n; i++) {
    ov[i] = (int)PyLong_AsLong(PyTuple_GetItem(t, i));
    if (ov[i] < 0 || ov[i] >= pg->nvals) {
      PyMem_Free(ov);
      Py_DECREF(t);
      return PyErr_Format(PyExc_ValueError, "set_outputs: unknown value %d", ov[i]);
    }
  }
  Py_DECREF(t);
  kl_program_set_outputs(pg, ov, (int)n);
  PyMem_Free(ov);
  Py_RETURN_NONE;
}

static PyObject *builder_text(PyObject *self, PyObject *unused) {
  (void)unused;
  kl_str s;
  kl_str_init(&s);
  kl_program_print(((BuilderObject *)self)->pg, &s);
  PyObject *r = s.failed ? PyErr_NoMemory() : PyUnicode_FromString(s.data ? s.data : "");
  kl_str_free(&s);
  return r;
}

static PyObject *builder_verify(PyObject *self, PyObject *unused) {
  (void)unused;
  char err[1024];
  if (kl_program_verify(((BuilderObject *)self)->pg, err, sizeof err)) {
    PyErr_SetString(PyExc_AssertionError, err);
    return NULL;
  }
  Py_RETURN_NONE;
}

static PyObject *builder_hash(PyObject *self, PyObject *unused) {
  (void)unused;
  return PyLong_FromUnsignedLongLong(kl_program_hash(((BuilderObject *)self)->pg));
}

static PyObject *builder_counts(PyObject *self, PyObject *unused) {
  (void)unused;
  kl_program *pg = ((BuilderObject *)self)->pg;
  return Py_BuildValue("(iii)", pg->ninputs, pg->neqns, pg->noutputs);
}

/* simplify(bind=()): algebraic simplification, CSE and DCE of the program, in place. bind is a
 * sequence of (input position, value): those inputs are treated as that constant (the caller
 * still passes them). Input and output lists keep their length; outputs may name other values. */
static PyObject *builder_simplify(PyObject *self, PyObject *args) {
  kl_program *pg = ((BuilderObject *)self)->pg;
  PyObject *bind = NULL;
  if (!PyArg_ParseTuple(args, "|O:simplify", &bind)) return NULL;
  PyObject *seq = bind ? PySequence_Tuple(bind) : PyTuple_New(0);
  if (!seq) return NULL;
  for (Py_ssize_t i = 0; i < PyTuple_Size(seq); i++) {
    int pos;
    double value;
    if (!PyArg_ParseTuple(PyTuple_GetItem(seq, i), "id:simplify bind entry (position, value)", &pos, &value) ||
        kl_simplify_bind_input(pg, pos, value)) {
      Py_DECREF(seq);
      if (!PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "simplify: cannot bind input %d (out of range or bool)", pos);
      return NULL;
    }
  }
  Py_DECREF(seq);
  char err[512];
  kl_program *opt = kl_pipeline_run(pg, KL_PIPE_OPTIMIZE, err, sizeof err);
  if (!opt) return PyErr_Format(PyExc_RuntimeError, "simplify: %s", err);
  kl_program_free(pg);
  ((BuilderObject *)self)->pg = opt;
  Py_RETURN_NONE;
}

/* The pass pipeline then code generation: an executable (owned) or NULL with a message. The
 * traced program is left as it is. ptx_cc > 0: the PTX for that compute capability instead
 * (*ptx, malloc'd). */
static kl_exec *compile_program_locked(const kl_program *traced, int device, int ptx_cc, char **ptx,
                                       const char *donatable, char *err, size_t errlen) {
  kl_program *pg = kl_pipeline_run(traced, KL_PIPE_COMPILE, err, errlen);
  if (!pg) return NULL;
  kl_exec *x = NULL;
  if (ptx_cc > 0) *ptx = kl_compile_gpu_ptx(pg, ptx_cc, err, errlen);
  else x = device == KL_DEV_CUDA ? kl_compile_gpu(pg, donatable, err, errlen) : kl_compile_cpu(pg, donatable, err, errlen);
  if (x && kl_compile_report_copies(x, err, errlen)) { /* forbidden copies */
    kl_exec_release(x);
    x = NULL;
  }
  kl_program_free(pg);
  return x;
}

/* Compiles run without the GIL, one at a time: the pass pipeline and the kernel writers keep
 * per-compile state in a few statics (the GPU writer's workgroup size, lazily read knobs), and
 * MLIR and LLVM are serialized underneath anyway. Threads that meet new shapes at once wait here,
 * not on Python. */
static pthread_mutex_t compile_mu = PTHREAD_MUTEX_INITIALIZER;

static kl_exec *compile_program(const kl_program *traced, int device, int ptx_cc, char **ptx, const char *donatable,
                                char *err, size_t errlen) {
  pthread_mutex_lock(&compile_mu);
  kl_exec *x = compile_program_locked(traced, device, ptx_cc, ptx, donatable, err, errlen);
  pthread_mutex_unlock(&compile_mu);
  return x;
}

/* compile(device=default, donatable=(), name=None) -> Executable; donatable: the input positions a
 * call may donate (jit's donate_argnums): only those may give an output their buffer (exe.donors);
 * name: what profiles call it (jit's function, an eager primitive). */
static PyObject *builder_compile(PyObject *self, PyObject *args) {
  int device = default_device;
  PyObject *don = NULL;
  const char *name = NULL;
  if (!PyArg_ParseTuple(args, "|iOz", &device, &don, &name)) return NULL;
  if (device < 0) device = default_device;
  kl_program *pg = ((BuilderObject *)self)->pg;
  char *donatable = NULL;
  PyObject *seq = don ? PySequence_Tuple(don) : NULL;
  if (don && !seq) return NULL;
  if (seq && PyTuple_Size(seq)) {
    donatable = PyMem_Calloc((size_t)pg->ninputs + 1, 1);
    if (!donatable) {
      Py_DECREF(seq);
      return PyErr_NoMemory();
    }
    for (Py_ssize_t k = 0; k < PyTuple_Size(seq); k++) {
      long i = PyLong_AsLong(PyTuple_GetItem(seq, k));
      if (i < 0 || i >= pg->ninputs) {
        Py_DECREF(seq);
        PyMem_Free(donatable);
        if (!PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "compile: donatable input %ld out of range [0, %d)", i, pg->ninputs);
        return NULL;
      }
      donatable[i] = 1;
    }
  }
  Py_XDECREF(seq);
  char err[4096];
  kl_exec *x;
  uint64_t t0 = kl_prof_begin();
  Py_BEGIN_ALLOW_THREADS
  x = compile_program(pg, device, 0, NULL, donatable, err, sizeof err);
  Py_END_ALLOW_THREADS
  PyMem_Free(donatable);
  if (x && name) snprintf(x->name, sizeof x->name, "%s", name);
  if (t0) kl_py_prof_compile(x, pg, t0);
  if (!x) {
    return kl_py_raise(NULL, err);
  }
  ExecObject *o = (ExecObject *)PyType_GenericNew((PyTypeObject *)ExecType, NULL, NULL);
  if (!o) {
    kl_exec_release(x);
    return NULL;
  }
  o->x = x;
  o->ninputs = x->ninputs;
  o->noutputs = x->noutputs;
  return (PyObject *)o;
}

static PyObject *builder_gpu_ptx(PyObject *self, PyObject *args) {
  int cc = 90;
  if (!PyArg_ParseTuple(args, "|i", &cc)) return NULL;
  char err[4096];
  char *ptx = NULL;
  if (cc <= 0) return PyErr_Format(PyExc_ValueError, "gpu_ptx: compute capability %d must be positive", cc);
  Py_BEGIN_ALLOW_THREADS
  compile_program(((BuilderObject *)self)->pg, KL_DEV_CUDA, cc, &ptx, NULL, err, sizeof err);
  Py_END_ALLOW_THREADS
  if (!ptx) {
    return kl_py_raise(NULL, err);
  }
  PyObject *r = PyUnicode_FromString(ptx);
  free(ptx);
  return r;
}

static PyObject *builder_wrap(kl_program *pg) {
  BuilderObject *o = (BuilderObject *)PyType_GenericNew((PyTypeObject *)BuilderType, NULL, NULL);
  if (!o) {
    kl_program_free(pg);
    return NULL;
  }
  o->pg = pg;
  return (PyObject *)o;
}

kl_program *kl_py_builder_program(PyObject *o) {
  if (!PyObject_TypeCheck(o, (PyTypeObject *)BuilderType)) {
    PyErr_SetString(PyExc_TypeError, "expected a program (a Builder)");
    return NULL;
  }
  return ((BuilderObject *)o)->pg;
}

static char *flags_from(PyObject *seq, int n, const char *what) {
  PyObject *t = PySequence_Tuple(seq);
  if (!t) return NULL;
  if (PyTuple_Size(t) != n) {
    Py_DECREF(t);
    PyErr_Format(PyExc_ValueError, "%s: expected %d flags, got %zd", what, n, PyTuple_Size(t));
    return NULL;
  }
  char *f = PyMem_Malloc((size_t)n + 1);
  for (int i = 0; i < n; i++) f[i] = (char)PyObject_IsTrue(PyTuple_GetItem(t, i));
  Py_DECREF(t);
  return f;
}

/* jvp(has_tangent) -> Builder: inputs (primals, tangents of flagged float inputs),
 * outputs (primal outputs, output tangents). */
static PyObject *builder_jvp(PyObject *self, PyObject *arg) {
  kl_program *pg = ((BuilderObject *)self)->pg;
  char *f = flags_from(arg, pg->ninputs, "jvp");
  if (!f) return NULL;
  char err[1024];
  kl_program *j = kl_jvp(pg, f, NULL, err, sizeof err);
  PyMem_Free(f);
  if (!j) return kl_py_raise(NULL, err);
  return builder_wrap(j);
}

/* vjp(wants) -> Builder: inputs (primals, output cotangents), outputs (primal outputs,
 * cotangents of the wanted inputs). */
static PyObject *builder_vjp(PyObject *self, PyObject *arg) {
  kl_program *pg = ((BuilderObject *)self)->pg;
  char *f = flags_from(arg, pg->ninputs, "vjp");
  if (!f) return NULL;
  char err[1024];
  kl_program *v = kl_vjp(pg, f, err, sizeof err);
  PyMem_Free(f);
  if (!v) return kl_py_raise(NULL, err);
  return builder_wrap(v);
}

/* vmap(in_axes, size) -> (Builder, out_batched): in_axes has one entry per input (its batch
 * axis, or -1 when unbatched); outputs flagged in out_batched carry the batch at axis 0. */
static PyObject *builder_vmap(PyObject *self, PyObject *args) {
  kl_program *pg = ((BuilderObject *)self)->pg;
  PyObject *seq;
  long long size;
  if (!PyArg_ParseTuple(args, "OL", &seq, &size)) return NULL;
  PyObject *t = PySequence_Tuple(seq);
  if (!t) return NULL;
  if (PyTuple_Size(t) != pg->ninputs) {
    Py_DECREF(t);
    return PyErr_Format(PyExc_ValueError, "vmap: expected %d in_axes entries, got %zd", pg->ninputs, PyTuple_Size(t));
  }
  int *axes = PyMem_Malloc(sizeof(int) * ((size_t)pg->ninputs + 1));
  char *batched = PyMem_Malloc((size_t)pg->noutputs + 1);
  for (int i = 0; i < pg->ninputs; i++) axes[i] = (int)PyLong_AsLong(PyTuple_GetItem(t, i));
  Py_DECREF(t);
  if (PyErr_Occurred()) {
    PyMem_Free(axes);
    PyMem_Free(batched);
    return NULL;
  }
  char err[1024];
  kl_program *v = kl_vmap(pg, axes, (int64_t)size, batched, err, sizeof err);
  PyMem_Free(axes);
  if (!v) {
    PyMem_Free(batched);
    return PyErr_Occurred() ? NULL : kl_py_raise(NULL, err); /* a user batching rule's own exception */
  }
  PyObject *flags = PyTuple_New(pg->noutputs);
  for (int i = 0; i < pg->noutputs; i++) PyTuple_SetItem(flags, i, PyBool_FromLong(batched[i]));
  PyMem_Free(batched);
  PyObject *w = builder_wrap(v);
  if (!w) {
    Py_DECREF(flags);
    return NULL;
  }
  return Py_BuildValue("(NN)", w, flags);
}

/* The params of e by name; program fields as Builders holding a reference to the body. */
static PyObject *params_dict(const kl_eqn *e) {
  PyObject *d = PyDict_New();
  if (!d) return NULL;
  for (const kl_param_field *f = kl_prim_get(e->prim)->fields; f->name; f++) {
    const void *at = kl_param_cptr(&e->p, f);
    PyObject *val = NULL;
    switch (f->kind) {
    case KL_PF_IVEC: {
      const kl_ivec *v = at;
      val = PyTuple_New(v->n);
      for (int i = 0; val && i < v->n; i++) PyTuple_SetItem(val, i, PyLong_FromLongLong(v->v[i]));
      break;
    }
    case KL_PF_INT: val = PyLong_FromLongLong(*(const int64_t *)at); break;
    case KL_PF_INT32: case KL_PF_LOC: case KL_PF_HINT: val = PyLong_FromLong(*(const int *)at); break;
    case KL_PF_FLOAT: case KL_PF_FLOAT_NZ: val = PyFloat_FromDouble(*(const double *)at); break;
    case KL_PF_DTYPE: {
      int dt = *(const int *)at;
      val = dt >= 0 ? PyUnicode_FromString(kl_dtype_name((kl_dtype)dt)) : Py_NewRef(Py_None);
      break;
    }
    case KL_PF_PROGRAM: {
      kl_program *body = *(kl_program *const *)at;
      if (!body) val = Py_NewRef(Py_None);
      else {
        kl_program_retain(body);
        val = builder_wrap(body);
      }
      break;
    }
    }
    if (!val || PyDict_SetItemString(d, f->name, val)) {
      Py_XDECREF(val);
      Py_DECREF(d);
      return NULL;
    }
    Py_DECREF(val);
  }
  return d;
}

/* equations() -> list of (prim, ins, outs, params); inputs() / outputs() -> tuples of ids. */
static PyObject *builder_equations(PyObject *self, PyObject *unused) {
  (void)unused;
  return kl_py_program_equations(((BuilderObject *)self)->pg, 0);
}

PyObject *kl_py_program_equations(const kl_program *pg, int from) {
  if (from < 0 || from > pg->neqns) from = pg->neqns;
  PyObject *l = PyList_New(pg->neqns - from);
  if (!l) return NULL;
  for (int k = from; k < pg->neqns; k++) {
    const kl_eqn *e = &pg->eqns[k];
    PyObject *ins = PyTuple_New(e->nin), *outs = PyTuple_New(e->nout);
    for (int i = 0; i < e->nin; i++) PyTuple_SetItem(ins, i, PyLong_FromLong(e->ins[i]));
    for (int i = 0; i < e->nout; i++) PyTuple_SetItem(outs, i, PyLong_FromLong(e->outs[i]));
    PyList_SetItem(l, k - from, Py_BuildValue("(sNNN)", kl_prim_get(e->prim)->name, ins, outs, params_dict(e)));
  }
  return l;
}

static PyObject *id_tuple(const int *ids, int n) {
  PyObject *t = PyTuple_New(n);
  for (int i = 0; i < n; i++) PyTuple_SetItem(t, i, PyLong_FromLong(ids[i]));
  return t;
}

static PyObject *builder_inputs(PyObject *self, PyObject *unused) {
  (void)unused;
  kl_program *pg = ((BuilderObject *)self)->pg;
  return id_tuple(pg->inputs, pg->ninputs);
}

static PyObject *builder_outputs(PyObject *self, PyObject *unused) {
  (void)unused;
  kl_program *pg = ((BuilderObject *)self)->pg;
  return id_tuple(pg->outputs, pg->noutputs);
}

static PyObject *builder_aval(PyObject *self, PyObject *arg) {
  kl_program *pg = ((BuilderObject *)self)->pg;
  long v = PyLong_AsLong(arg);
  if (v < 0 || v >= pg->nvals) return PyErr_Format(PyExc_IndexError, "aval: unknown value %ld", v);
  return aval_tuple(&pg->vals[v].aval, (int)v);
}

/* take_body(explicit=-1) -> Builder: moves this builder's program into a new Builder, to be passed
 * as a body param; bodies never change again, so this builder is left empty. With explicit >= 0
 * the inputs past the first `explicit` (the consts a trace added) move to the front, as a scan
 * body takes them. */
static PyObject *builder_take_body(PyObject *self, PyObject *args) {
  BuilderObject *b = (BuilderObject *)self;
  int explicit_n = -1;
  if (!PyArg_ParseTuple(args, "|i", &explicit_n)) return NULL;
  kl_program *body = b->pg;
  if (explicit_n > body->ninputs) return PyErr_Format(PyExc_ValueError, "take_body: %d explicit inputs of %d", explicit_n, body->ninputs);
  if (explicit_n > 0 && explicit_n < body->ninputs) {
    int *rot = malloc(sizeof(int) * (size_t)body->ninputs), nk = body->ninputs - explicit_n;
    if (!rot) return PyErr_NoMemory();
    memcpy(rot, body->inputs + explicit_n, sizeof(int) * (size_t)nk);
    memcpy(rot + nk, body->inputs, sizeof(int) * (size_t)explicit_n);
    memcpy(body->inputs, rot, sizeof(int) * (size_t)body->ninputs);
    free(rot);
  }
  kl_program *fresh = kl_program_new();
  if (!fresh) return PyErr_NoMemory();
  b->pg = fresh;
  return builder_wrap(body);
}

static PyObject *builder_without_effects(PyObject *self, PyObject *unused) {
  (void)unused;
  kl_program *pg = kl_program_without_effects(((BuilderObject *)self)->pg);
  return pg ? builder_wrap(pg) : PyErr_NoMemory();
}

static PyMethodDef builder_methods[] = {
    {"without_effects", builder_without_effects, METH_NOARGS,
     "without_effects() -> a copy whose effect callbacks (debug.print) are gone, in bodies too"},
    {"take_body", builder_take_body, METH_VARARGS, "take_body(explicit=-1) -> Builder (this one is left empty)"},
    {"jvp", builder_jvp, METH_O, "jvp(has_tangent) -> Builder"},
    {"vjp", builder_vjp, METH_O, "vjp(wants) -> Builder"},
    {"vmap", builder_vmap, METH_VARARGS, "vmap(in_axes, size) -> (Builder, out_batched)"},
    {"equations", builder_equations, METH_NOARGS, "list of (prim, ins, outs, params)"},
    {"inputs", builder_inputs, METH_NOARGS, "input value ids"},
    {"outputs", builder_outputs, METH_NOARGS, "output value ids"},
    {"aval", builder_aval, METH_O, "aval(id) -> (id, shape, dtype, weak)"},
    {"add_input", builder_add_input, METH_VARARGS, "add_input(shape, dtype, weak) -> value id"},
    {"add_eqn", builder_add_eqn, METH_VARARGS, "add_eqn(prim, ins, params) -> output avals"},
    {"set_outputs", builder_set_outputs, METH_O, "set_outputs(ids)"},
    {"text", builder_text, METH_NOARGS, "the program as text"},
    {"verify", builder_verify, METH_NOARGS, "check the program"},
    {"hash", builder_hash, METH_NOARGS, "structural hash"},
    {"counts", builder_counts, METH_NOARGS, "(inputs, equations, outputs)"},
    {"compile", builder_compile, METH_VARARGS, "compile(device=default, donatable=()) -> Executable"},
    {"gpu_ptx", builder_gpu_ptx, METH_VARARGS, "gpu_ptx(cc=90) -> the PTX of the program's kernels (no GPU needed)"},
    {"simplify", builder_simplify, METH_VARARGS, "simplify(bind=()): simplify, CSE and DCE in place"},
    {NULL, NULL, 0, NULL}};

static PyType_Slot builder_slots[] = {{Py_tp_new, builder_new},
                                      {Py_tp_dealloc, builder_dealloc},
                                      {Py_tp_methods, builder_methods},
                                      {Py_tp_doc, "A kiln Program under construction."},
                                      {0, NULL}};

static PyType_Spec builder_spec = {"kiln._kiln.Builder", sizeof(BuilderObject), 0, Py_TPFLAGS_DEFAULT, builder_slots};

/* ---- Executable ---- */

static void exec_dealloc(PyObject *self) {
  kl_exec_release(((ExecObject *)self)->x);
  PyTypeObject *tp = Py_TYPE(self);
  freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
  f(self);
  Py_DECREF(tp);
}

/* Executable(*buffers) -> tuple of Buffers, returned before the work is done. */
static PyObject *exec_call(PyObject *self, PyObject *args, PyObject *kw) {
  (void)kw;
  ExecObject *o = (ExecObject *)self;
  Py_ssize_t n = PyTuple_Size(args);
  if (n != o->ninputs) return PyErr_Format(PyExc_TypeError, "executable expects %d buffers, got %zd", o->ninputs, n);
  kl_buffer *ins_small[16], *outs_small[16];
  kl_buffer **ins = n <= 16 ? ins_small : PyMem_Malloc(sizeof(kl_buffer *) * (size_t)n);
  kl_buffer **outs = o->noutputs <= 16 ? outs_small : PyMem_Malloc(sizeof(kl_buffer *) * (size_t)o->noutputs);
  PyObject *res = NULL;
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *b = PyTuple_GetItem(args, i);
    if (!PyObject_TypeCheck(b, (PyTypeObject *)BufferType)) {
      PyErr_Format(PyExc_TypeError, "executable argument %zd is not a Buffer", i);
      goto done;
    }
    ins[i] = ((BufferObject *)b)->buf;
    if (ins[i]->device != o->x->device) { /* an array committed elsewhere: bring it over */
      char terr[512];
      kl_buffer *t;
      Py_BEGIN_ALLOW_THREADS
      t = transfer(ins[i], o->x->device, terr, sizeof terr);
      Py_END_ALLOW_THREADS
      if (!t) {
        PyErr_Format(PyExc_MemoryError, "%s", terr);
        for (Py_ssize_t k = 0; k < i; k++)
          if (ins[k] != ((BufferObject *)PyTuple_GetItem(args, k))->buf) kl_buf_release(ins[k]);
        goto done;
      }
      ins[i] = t;
    }
  }
  char err[512];
  int lrc = kl_exec_launch(o->x, ins, outs, err, sizeof err);
  for (Py_ssize_t i = 0; i < n; i++) /* drop the transferred copies (the launch holds what it needs) */
    if (ins[i] != ((BufferObject *)PyTuple_GetItem(args, i))->buf) kl_buf_release(ins[i]);
  if (lrc) {
    kl_py_raise(NULL, err);
    goto done;
  }
  if (kl_py_wait_callbacks(o->x, outs, o->noutputs)) goto done;
  res = PyTuple_New(o->noutputs);
  for (int i = 0; i < o->noutputs; i++) PyTuple_SetItem(res, i, buffer_new_from(outs[i]));
done:
  if (ins != ins_small) PyMem_Free(ins);
  if (outs != outs_small) PyMem_Free(outs);
  return res;
}

/* A sequence of n ints as a PyMem_Malloc'd array (NULL with an exception set otherwise). */
static int *int_array(PyObject *seq, Py_ssize_t *n, const char *what) {
  *n = PySequence_Size(seq);
  if (*n < 0) {
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError, "%s: expected a sequence of ints", what);
    return NULL;
  }
  int *a = PyMem_Malloc(sizeof(int) * (size_t)(*n + 1));
  for (Py_ssize_t i = 0; a && i < *n; i++) {
    PyObject *it = PySequence_GetItem(seq, i);
    long v = it ? PyLong_AsLong(it) : -1;
    Py_XDECREF(it);
    if (v == -1 && PyErr_Occurred()) {
      PyMem_Free(a);
      a = NULL;
      break;
    }
    a[i] = (int)v;
  }
  if (!a && !PyErr_Occurred()) PyErr_NoMemory();
  return a;
}

/* launch_group(ordinals, per_participant, ranks=None, procs=None) -> list of tuples of Buffers: an
 * SPMD launch, participant p on device ordinals[p] over the Buffers per_participant[p]
 * (kl_exec_launch_group); with ranks and procs, participant p is rank ranks[p] of a group of
 * len(procs) ranks spanning processes, rank r run by process procs[r]. */
static PyObject *exec_launch_group(PyObject *self, PyObject *args) {
  ExecObject *o = (ExecObject *)self;
  PyObject *ords, *per, *ranks_o = Py_None, *procs_o = Py_None;
  if (!PyArg_ParseTuple(args, "OO|OO", &ords, &per, &ranks_o, &procs_o)) return NULL;
  Py_ssize_t n = PySequence_Size(ords);
  if (n < 1 || PySequence_Size(per) != n) return PyErr_Format(PyExc_ValueError, "launch_group: one tuple of buffers per device");
  kl_span span_v, *span = NULL;
  int *ranks = NULL, *procs = NULL;
  if (ranks_o != Py_None || procs_o != Py_None) {
    Py_ssize_t nr = 0, np = 0;
    ranks = int_array(ranks_o, &nr, "launch_group: ranks");
    procs = ranks ? int_array(procs_o, &np, "launch_group: procs") : NULL;
    if (procs && nr != n) PyErr_Format(PyExc_ValueError, "launch_group: one rank per device");
    if (!procs || nr != n) {
      PyMem_Free(ranks);
      PyMem_Free(procs);
      return NULL;
    }
    span_v = (kl_span){(int)np, ranks, procs};
    span = &span_v;
  }
  int *ordinals = PyMem_Malloc(sizeof(int) * (size_t)n);
  kl_buffer **ins = PyMem_Malloc(sizeof(kl_buffer *) * ((size_t)n * (size_t)o->ninputs + 1));
  kl_buffer **outs = PyMem_Malloc(sizeof(kl_buffer *) * ((size_t)n * (size_t)o->noutputs + 1));
  PyObject *res = NULL;
  if (!ordinals || !ins || !outs) {
    PyErr_NoMemory();
    goto done;
  }
  for (Py_ssize_t p = 0; p < n; p++) {
    PyObject *op = PySequence_GetItem(ords, p), *bp = PySequence_GetItem(per, p);
    ordinals[p] = op ? (int)PyLong_AsLong(op) : -1;
    Py_ssize_t m = bp ? PySequence_Size(bp) : -1;
    int bad = !op || !bp || m != o->ninputs || PyErr_Occurred();
    for (Py_ssize_t i = 0; !bad && i < m; i++) {
      PyObject *b = PySequence_GetItem(bp, i);
      bad = !b || !PyObject_TypeCheck(b, (PyTypeObject *)BufferType) || ((BufferObject *)b)->buf->device != o->x->device;
      if (!bad) ins[p * o->ninputs + i] = ((BufferObject *)b)->buf; /* the caller's tuples keep them alive */
      Py_XDECREF(b);
    }
    Py_XDECREF(op);
    Py_XDECREF(bp);
    if (bad) {
      if (!PyErr_Occurred())
        PyErr_Format(PyExc_TypeError, "launch_group: participant %zd needs %d Buffers on the executable's device", p,
                     o->ninputs);
      goto done;
    }
  }
  char err[512];
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = kl_exec_launch_group(o->x, (int)n, ordinals, span, ins, outs, err, sizeof err);
  Py_END_ALLOW_THREADS
  if (rc) {
    kl_py_raise(NULL, err);
    goto done;
  }
  res = PyList_New(n);
  for (Py_ssize_t p = 0; res && p < n; p++) {
    PyObject *t = PyTuple_New(o->noutputs);
    for (int i = 0; t && i < o->noutputs; i++) PyTuple_SetItem(t, i, buffer_new_from(outs[p * o->noutputs + i]));
    PyList_SetItem(res, p, t);
  }
done:
  PyMem_Free(ordinals);
  PyMem_Free(ins);
  PyMem_Free(outs);
  PyMem_Free(ranks);
  PyMem_Free(procs);
  return res;
}

static PyMethodDef exec_methods[] = {
    {"launch_group", exec_launch_group, METH_VARARGS,
     "launch_group(ordinals, per_participant, ranks=None, procs=None) -> list of tuples of Buffers (an SPMD "
     "launch; with ranks and procs, of a group spanning processes)"},
    {NULL, NULL, 0, NULL}};

static PyObject *exec_steps(PyObject *self, void *unused) {
  (void)unused;
  return PyLong_FromLong(((ExecObject *)self)->x->nsteps);
}

static PyObject *exec_device(PyObject *self, void *unused) {
  (void)unused;
  return PyLong_FromLong(((ExecObject *)self)->x->device);
}

static PyObject *exec_host_steps(PyObject *self, void *unused) {
  (void)unused;
  const char *h = ((ExecObject *)self)->x->host_steps;
  PyObject *res = PyList_New(0);
  while (res && h && *h) {
    const char *nl = strchr(h, '\n');
    size_t n = nl ? (size_t)(nl - h) : strlen(h);
    while (n && *h == ' ') h++, n--;
    PyObject *line = PyUnicode_FromStringAndSize(h, (Py_ssize_t)n);
    if (!line || PyList_Append(res, line)) {
      Py_XDECREF(line);
      Py_DECREF(res);
      return NULL;
    }
    Py_DECREF(line);
    h += n + (nl != NULL);
  }
  return res;
}

static PyObject *exec_donors(PyObject *self, void *unused) {
  (void)unused;
  ExecObject *o = (ExecObject *)self;
  PyObject *t = PyTuple_New(o->noutputs);
  for (int i = 0; t && i < o->noutputs; i++) PyTuple_SetItem(t, i, PyLong_FromLong(o->x->donor ? o->x->donor[i] : -1));
  return t;
}

/* Per output, the input it is (the same slot: the program hands that input back), or -1. */
static PyObject *exec_passthrough(PyObject *self, void *unused) {
  (void)unused;
  ExecObject *o = (ExecObject *)self;
  PyObject *t = PyTuple_New(o->noutputs);
  for (int j = 0; t && j < o->noutputs; j++) {
    long in = -1;
    for (int i = 0; i < o->x->ninputs && in < 0; i++)
      if (o->x->in_slots[i] == o->x->out_slots[j]) in = i;
    PyTuple_SetItem(t, j, PyLong_FromLong(in));
  }
  return t;
}

static PyGetSetDef exec_getset[] = {
    {"donors", exec_donors, NULL, "per output, the input whose donated buffer it may take, or -1", NULL},
    {"passthrough", exec_passthrough, NULL, "per output, the input it hands back unchanged, or -1", NULL},
    {"host_steps", exec_host_steps, NULL, "steps of a GPU executable that run on the host over copies", NULL},
    {"num_steps", exec_steps, NULL, "launches per call: kernels and library calls (for fusion tests)", NULL},
    {"device", exec_device, NULL, "0: CPU, 1: GPU", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyType_Slot exec_slots[] = {{Py_tp_dealloc, exec_dealloc},
                                   {Py_tp_getset, exec_getset},
                                   {Py_tp_methods, exec_methods},
                                   {Py_tp_call, exec_call},
                                   {Py_tp_doc, "A compiled kiln program."},
                                   {0, NULL}};

static PyType_Spec exec_spec = {"kiln._kiln.Executable", sizeof(ExecObject), 0, Py_TPFLAGS_DEFAULT, exec_slots};

/* ---- host callbacks ---- */

static PyObject *callback_handler; /* kiln._src.callback.run(id, ins, outs), or NULL */

/* [(shape, dtype name, memoryview)] over n host buffers */
static PyObject *callback_args(int n, const kl_aval *avals, void *const *ptrs, int writable) {
  PyObject *list = PyList_New(n);
  for (int i = 0; list && i < n; i++) {
    const kl_aval *a = &avals[i];
    PyObject *shape = PyTuple_New(a->ndim);
    for (int d = 0; shape && d < a->ndim; d++) PyTuple_SetItem(shape, d, PyLong_FromLongLong(a->dims[d]));
    Py_ssize_t nbytes = (Py_ssize_t)((size_t)kl_aval_size(a) * kl_dtype_size(a->dtype));
    PyObject *mv = PyMemoryView_FromMemory(ptrs[i], nbytes, writable ? PyBUF_WRITE : PyBUF_READ);
    PyObject *item = shape && mv ? Py_BuildValue("(OsO)", shape, kl_dtype_name(a->dtype), mv) : NULL;
    Py_XDECREF(shape);
    Py_XDECREF(mv);
    if (!item) {
      Py_CLEAR(list);
      break;
    }
    PyList_SetItem(list, i, item);
  }
  return list;
}

/* kl_callback_fn: runs on the runtime's threads (or the caller's); takes the GIL. */
static int py_callback(int64_t id, int nin, const kl_aval *in_avals, void *const *ins, int nout,
                       const kl_aval *out_avals, void *const *outs, char *err, size_t errlen) {
  PyGILState_STATE g = PyGILState_Ensure();
  int rc = 0;
  PyObject *a = callback_args(nin, in_avals, ins, 0), *b = a ? callback_args(nout, out_avals, outs, 1) : NULL;
  PyObject *res = b && callback_handler ? PyObject_CallFunction(callback_handler, "LOO", (long long)id, a, b) : NULL;
  if (!res) {
    rc = -1;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject *msg = value ? PyObject_Str(value) : NULL;
    PyObject *tname = type ? PyObject_GetAttrString(type, "__name__") : NULL;
    const char *m = msg ? PyUnicode_AsUTF8AndSize(msg, NULL) : NULL, *t = tname ? PyUnicode_AsUTF8AndSize(tname, NULL) : NULL;
    if (PyErr_Occurred()) PyErr_Clear();
    kl_error(err, errlen, KL_ERR_INTERNAL, "callback raised %s: %s", t ? t : "an exception",
             m ? m : "(no message)");
    Py_XDECREF(msg);
    Py_XDECREF(tname);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
  }
  Py_XDECREF(res);
  Py_XDECREF(a);
  Py_XDECREF(b);
  PyGILState_Release(g);
  return rc;
}

static PyObject *mod_set_callback_handler(PyObject *self, PyObject *fn) {
  (void)self;
  if (!PyCallable_Check(fn)) return PyErr_Format(PyExc_TypeError, "set_callback_handler: expects a callable");
  PyObject *old = callback_handler;
  callback_handler = Py_NewRef(fn);
  Py_XDECREF(old);
  kl_set_callback_fn(py_callback);
  Py_RETURN_NONE;
}

/* ---- module ---- */

static PyObject *mod_synchronize(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  Py_BEGIN_ALLOW_THREADS
  kl_rt_synchronize();
  Py_END_ALLOW_THREADS
  Py_RETURN_NONE;
}

/* stop_running(): Ctrl-C that lands outside a wait (kiln's SIGINT handler, kiln/__init__.py):
 * the loops running or queued are asked to stop (their outputs fail with "interrupted"), their
 * work settles, and the request is cleared, so the next program runs. */
static PyObject *mod_stop_running(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  kl_rt_stop_request();
  Py_BEGIN_ALLOW_THREADS
  kl_rt_synchronize();
  Py_END_ALLOW_THREADS
  kl_rt_stop_clear();
  Py_RETURN_NONE;
}

/* The allocation hook (ir/alloc.h), for the failing-allocation tests. */
static PyObject *mod_alloc_fail_at(PyObject *self, PyObject *arg) {
  (void)self;
  long n = PyLong_AsLong(arg);
  if (n == -1 && PyErr_Occurred()) return NULL;
  kl_alloc_fail_at(n);
  Py_RETURN_NONE;
}

/* copies_mode(bits): the copy log (1) and forbid-copies (2), ir/loc.h. */
static PyObject *mod_copies_mode(PyObject *self, PyObject *arg) {
  (void)self;
  long m = PyLong_AsLong(arg);
  if (m == -1 && PyErr_Occurred()) return NULL;
  kl_copies_set_mode((int)m);
  Py_RETURN_NONE;
}

/* loc_intern(text) -> id: a source location for an update's `loc` param. */
static PyObject *mod_loc_intern(PyObject *self, PyObject *arg) {
  (void)self;
  const char *t = PyUnicode_AsUTF8AndSize(arg, NULL);
  if (!t) return NULL;
  return PyLong_FromLong(kl_loc_intern(t));
}

static PyObject *mod_alloc_count(PyObject *self, PyObject *unused) {
  (void)self, (void)unused;
  return PyLong_FromLong(kl_alloc_count());
}

static PyObject *mod_compile_stats(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  return Py_BuildValue("(ld)", kl_compile_count(), kl_compile_seconds());
}

static PyObject *mod_num_threads(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  return PyLong_FromLong(kl_rt_num_threads());
}

static PyObject *mod_blas_search_path(PyObject *self, PyObject *arg) {
  (void)self;
  const char *s = PyUnicode_AsUTF8AndSize(arg, NULL);
  if (!s) return NULL;
  return PyLong_FromLong(kl_device_get(KL_DEV_CPU)->library_add_path(s)); /* 0: recorded */
}

static PyObject *mod_blas_library(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  char lib[512];
  kl_device_get(KL_DEV_CPU)->library(lib, sizeof lib);
  return PyUnicode_FromString(lib);
}

static PyObject *mod_gpu_available(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  char why[256] = "";
  int ok;
  Py_BEGIN_ALLOW_THREADS
  ok = gpu()->available(why, sizeof why);
  Py_END_ALLOW_THREADS
  return Py_BuildValue("(Os)", ok ? Py_True : Py_False, why);
}

/* fused_attention_why_not(dtype name, b, t, n, h, s, kv, scale, causal) -> None when cuDNN's fused
 * attention runs that call on this GPU (its plans built and cached now), else the reason. */
static PyObject *mod_fused_attention_why_not(PyObject *self, PyObject *args) {
  (void)self;
  const char *dname;
  long long b, t, n, h, s, kv;
  double scale;
  int causal;
  if (!PyArg_ParseTuple(args, "sLLLLLLdi", &dname, &b, &t, &n, &h, &s, &kv, &scale, &causal)) return NULL;
  kl_dtype dt;
  if (kl_dtype_from_name(dname, &dt)) return PyErr_Format(PyExc_ValueError, "fused_attention_why_not: dtype %s", dname);
  kl_attn_geom g = {.b = b, .t = t, .n = n, .h = h, .s = s, .kv = kv, .scale = scale, .causal = causal};
  char why[512] = "";
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = gpu()->available(why, sizeof why) ? kl_gpu_attention_why_not(dt, &g, why, sizeof why) : -1;
  Py_END_ALLOW_THREADS
  if (!rc) Py_RETURN_NONE;
  return PyUnicode_FromString(why[0] ? why : "cuDNN's fused attention is not available");
}

static PyObject *mod_gpu_count(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  return PyLong_FromLong(gpu()->available(NULL, 0) && gpu()->count ? gpu()->count() : 0);
}

static PyObject *mod_gpu_info(PyObject *self, PyObject *args) {
  (void)self;
  int ordinal = 0;
  if (!PyArg_ParseTuple(args, "|i", &ordinal)) return NULL;
  kl_device_info d;
  int old = gpu()->use_ordinal ? gpu()->use_ordinal(ordinal) : 0;
  gpu()->info(&d);
  if (gpu()->use_ordinal) gpu()->use_ordinal(old);
  return Py_BuildValue("{s:s,s:i,s:i,s:i,s:n,s:i}", "name", d.name, "cc_major", d.cc_major, "cc_minor", d.cc_minor,
                       "num_sms", d.num_sms, "total_mem", (Py_ssize_t)d.total_mem, "driver_version", d.driver_version);
}

static PyObject *mod_set_default_device(PyObject *self, PyObject *arg) {
  (void)self;
  long d = PyLong_AsLong(arg);
  if (d == -1 && PyErr_Occurred()) return NULL;
  if (d == KL_DEV_CUDA && !gpu()->available(NULL, 0)) return PyErr_Format(PyExc_RuntimeError, "no GPU available");
  default_device = (int)d;
  Py_RETURN_NONE;
}

static PyObject *mod_cublas_search_path(PyObject *self, PyObject *arg) {
  (void)self;
  const char *s = PyUnicode_AsUTF8AndSize(arg, NULL);
  if (!s) return NULL;
  return PyLong_FromLong(gpu()->library_add_path(s) == 0); /* 1: recorded */
}

static PyObject *mod_cublas_library(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  char lib[512] = "";
  int ok = gpu()->library(lib, sizeof lib);
  return Py_BuildValue("(Os)", ok ? Py_True : Py_False, lib);
}

/* The device of kind `arg` (an int) for `what`, or NULL with an exception. */
static const kl_device *device_arg(PyObject *arg, const char *what) {
  long kind = PyLong_AsLong(arg);
  if (kind == -1 && PyErr_Occurred()) return NULL;
  const kl_device *d = kl_device_get((int)kind);
  if (!d) PyErr_Format(PyExc_ValueError, "%s: no device of kind %ld", what, kind);
  return d;
}

/* memory_stats(kind): a device's memory as a dict of JAX's keys (Device.memory_stats). */
static PyObject *mod_memory_stats(PyObject *self, PyObject *arg) {
  (void)self;
  const kl_device *d = device_arg(arg, "memory_stats");
  if (!d) return NULL;
  kl_mem_stats s;
  Py_BEGIN_ALLOW_THREADS
  d->memory_stats(&s);
  Py_END_ALLOW_THREADS
  return Py_BuildValue("{s:L,s:L,s:L,s:L,s:L,s:L}", "bytes_in_use", s.bytes_in_use, "peak_bytes_in_use",
                       s.peak_bytes_in_use, "bytes_limit", s.bytes_limit, "num_allocs", s.num_allocs,
                       "largest_alloc_size", s.largest_alloc_size, "pool_bytes", s.pool_bytes);
}

/* reset_peak_memory(kind): the peak of memory_stats starts over from what is in use now. */
static PyObject *mod_reset_peak(PyObject *self, PyObject *arg) {
  (void)self;
  const kl_device *d = device_arg(arg, "reset_peak_memory");
  if (!d) return NULL;
  d->reset_peak();
  Py_RETURN_NONE;
}

/* empty_cache(kind): the device's pooled free memory back to the system or driver. */
static PyObject *mod_empty_cache(PyObject *self, PyObject *arg) {
  (void)self;
  const kl_device *d = device_arg(arg, "empty_cache");
  if (!d) return NULL;
  Py_BEGIN_ALLOW_THREADS
  d->empty_cache();
  Py_END_ALLOW_THREADS
  Py_RETURN_NONE;
}

static PyObject *mod_gpu_compile_stats(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  long c, d, m;
  kl_gpu_compile_stats(&c, &d, &m);
  return Py_BuildValue("(lll)", c, d, m);
}

static PyObject *mod_gpu_graph_stats(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  long g, b, l;
  kl_gpu_graph_stats(&g, &b, &l);
  return Py_BuildValue("(lll)", g, b, l);
}

static PyObject *mod_gpu_libdevice(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  const char *p = kl_gpu_libdevice();
  if (!p) Py_RETURN_NONE;
  return PyUnicode_FromString(p);
}

/* ---- the connections between processes (kiln.distributed; runtime/collective_net.h) ---- */

static PyObject *mod_net_listen(PyObject *self, PyObject *args) {
  (void)self;
  const char *host;
  if (!PyArg_ParseTuple(args, "s", &host)) return NULL;
  char err[512];
  int port;
  Py_BEGIN_ALLOW_THREADS
  port = kl_net_listen(host, err, sizeof err);
  Py_END_ALLOW_THREADS
  return port < 0 ? kl_py_raise(NULL, err) : PyLong_FromLong(port);
}

static PyObject *mod_net_connect(PyObject *self, PyObject *args) {
  (void)self;
  int me;
  PyObject *hosts_o, *ports_o;
  double timeout, exchange_timeout;
  if (!PyArg_ParseTuple(args, "iOOdd", &me, &hosts_o, &ports_o, &timeout, &exchange_timeout)) return NULL;
  Py_ssize_t n = 0, nh = PySequence_Size(hosts_o);
  int *ports = int_array(ports_o, &n, "net_connect: ports");
  if (!ports) return NULL;
  const char **hosts = PyMem_Calloc((size_t)n + 1, sizeof *hosts);
  PyObject *keep = PyList_New(0), *res = NULL;
  if (!hosts || !keep || nh != n) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "net_connect: one host and one port per process");
    goto done;
  }
  for (Py_ssize_t p = 0; p < n; p++) {
    PyObject *h = PySequence_GetItem(hosts_o, p);
    if (!h || PyList_Append(keep, h)) { /* the list keeps the strings alive */
      Py_XDECREF(h);
      goto done;
    }
    Py_DECREF(h);
    if (!(hosts[p] = PyUnicode_AsUTF8AndSize(PyList_GetItem(keep, p), NULL))) goto done;
  }
  char err[512];
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = kl_net_connect(me, (int)n, hosts, ports, timeout, exchange_timeout, err, sizeof err);
  Py_END_ALLOW_THREADS
  if (rc) kl_py_raise(NULL, err);
  else res = Py_NewRef(Py_None);
done:
  PyMem_Free(ports);
  PyMem_Free(hosts);
  Py_XDECREF(keep);
  return res;
}

static PyObject *mod_net_close(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  Py_BEGIN_ALLOW_THREADS
  kl_net_close();
  Py_END_ALLOW_THREADS
  Py_RETURN_NONE;
}

static PyMethodDef mod_methods[] = {
    {"net_listen", mod_net_listen, METH_VARARGS, "net_listen(host) -> port: this process's socket for collectives"},
    {"net_connect", mod_net_connect, METH_VARARGS,
     "net_connect(me, hosts, ports, timeout, collective_timeout): connects to every other process (collectives across processes)"},
    {"net_close", mod_net_close, METH_NOARGS, "closes the connections between processes"},
    {"gpu_libdevice", mod_gpu_libdevice, METH_NOARGS, "the libdevice file GPU math calls, or None"},
    {"from_buffer", mod_from_buffer, METH_VARARGS, "from_buffer(obj, device=-1): copy a contiguous buffer to a device"},
    {"transfer", mod_transfer, METH_VARARGS,
     "transfer(buffer, device, ordinal=-1) -> the buffer on that device (ordinal >= 0: committed to that one)"},
    {"to_dlpack", mod_to_dlpack, METH_VARARGS, "to_dlpack(buffer, shape, (code, bits), stream) -> capsule"},
    {"from_dlpack", mod_from_dlpack, METH_O, "from_dlpack(capsule) -> (Buffer, shape, (code, bits)) or None"},
    {"stream_handle", mod_stream_handle, METH_NOARGS, "kiln's CUDA stream (for DLPack consumers)"},
    {"gpu_available", mod_gpu_available, METH_NOARGS, "(usable, reason if not)"},
    {"fused_attention_why_not", mod_fused_attention_why_not, METH_VARARGS,
     "(dtype, b, t, n, h, s, kv, scale, causal) -> None, or why cuDNN's fused attention cannot run it"},
    {"gpu_info", mod_gpu_info, METH_VARARGS, "gpu_info(ordinal=0): facts about a GPU"},
    {"gpu_count", mod_gpu_count, METH_NOARGS, "how many GPUs kiln can use"},
    {"set_default_device", mod_set_default_device, METH_O, "0: CPU, 1: GPU"},
    {"cublas_search_path", mod_cublas_search_path, METH_O, "add a libcublas candidate path"},
    {"cublas_library", mod_cublas_library, METH_NOARGS, "(found, path or reason)"},
    {"memory_stats", mod_memory_stats, METH_O, "memory_stats(kind): a device's memory (JAX's keys)"},
    {"empty_cache", mod_empty_cache, METH_O, "empty_cache(kind): pooled free memory back to the system"},
    {"reset_peak_memory", mod_reset_peak, METH_O, "reset_peak_memory(kind): the peak starts over from now"},
    {"gpu_compile_stats", mod_gpu_compile_stats, METH_NOARGS, "(compiled, disk hits, memory hits) of GPU modules"},
    {"gpu_graph_stats", mod_gpu_graph_stats, METH_NOARGS, "(graphs built, conds queued as conditional nodes, device-side loops launched) on the GPU"},
    {"synchronize", mod_synchronize, METH_NOARGS, "wait for all launched work"},
    {"stop_running", mod_stop_running, METH_NOARGS, "Ctrl-C: stop the loops running, wait for the work to settle"},
    {"set_callback_handler", mod_set_callback_handler, METH_O,
     "set_callback_handler(fn): fn(id, ins, outs) runs host callbacks; ins/outs: [(shape, dtype, memoryview)]"},
    {"compile_stats", mod_compile_stats, METH_NOARGS, "(compiles, seconds)"},
    {"alloc_fail_at", mod_alloc_fail_at, METH_O, "alloc_fail_at(n): the nth core allocation from now fails (0: off)"},
    {"alloc_count", mod_alloc_count, METH_NOARGS, "core allocations so far"},
    {"copies_mode", mod_copies_mode, METH_O, "copies_mode(bits): 1 logs updates that copy, 2 makes them errors"},
    {"loc_intern", mod_loc_intern, METH_O, "loc_intern(text) -> id of a source location"},
    {"num_threads", mod_num_threads, METH_NOARGS, "worker threads of the CPU device"},
    {"blas_search_path", mod_blas_search_path, METH_O, "add a BLAS/LAPACK library candidate"},
    {"blas_library", mod_blas_library, METH_NOARGS, "the BLAS in use"},
    {NULL, NULL, 0, NULL}};

static int mod_exec(PyObject *m) {
  kl_compile_warmup_async();
  BufferType = PyType_FromSpec(&buffer_spec);
  BuilderType = PyType_FromSpec(&builder_spec);
  ExecType = PyType_FromSpec(&exec_spec);
  if (!BufferType || !BuilderType || !ExecType) return -1;
  Py_INCREF(BufferType);
  Py_INCREF(BuilderType);
  Py_INCREF(ExecType);
  if (kl_py_array_init(m) || kl_py_tracer_init(m) || kl_py_batch_rule_init(m) || kl_py_pytree_init(m) ||
      kl_py_profiler_init(m) || kl_py_testing_init(m))
    return -1;
  if (PyModule_AddObject(m, "Buffer", BufferType) || PyModule_AddObject(m, "Builder", BuilderType) ||
      PyModule_AddObject(m, "Executable", ExecType))
    return -1;
  return 0;
}

int kl_py_parse_params(kl_prim prim, PyObject *dict, kl_params *p, int64_t store[8][64]) {
  return parse_params(prim, dict, p, store);
}

PyObject *kl_py_builder_wrap(kl_program *pg) { return builder_wrap(pg); }

PyObject *kl_py_raise(const char *prefix, const char *msg) {
  PyObject *cls;
  switch (kl_status_last()) {
  case KL_ERR_TYPE: cls = PyExc_TypeError; break;
  case KL_ERR_VALUE: cls = PyExc_ValueError; break;
  case KL_ERR_INDEX: cls = PyExc_IndexError; break;
  case KL_ERR_UNSUPPORTED: cls = PyExc_NotImplementedError; break;
  case KL_ERR_NOMEM: cls = PyExc_MemoryError; break;
  case KL_ERR_INTERRUPTED: cls = PyExc_KeyboardInterrupt; break;
  case KL_ERR_COPY: { /* kiln.errors.CopyError (a RuntimeError) */
    PyObject *mod = PyImport_ImportModule("kiln.errors");
    PyObject *c = mod ? PyObject_GetAttrString(mod, "CopyError") : NULL;
    Py_XDECREF(mod);
    kl_status_clear();
    if (!c) return NULL;
    PyErr_Format(c, "%s%s", prefix ? prefix : "", msg);
    Py_DECREF(c);
    return NULL;
  }
  default: cls = runtime_error(); break;
  }
  kl_status_clear();
  return PyErr_Format(cls, "%s%s", prefix ? prefix : "", msg);
}

int kl_py_is_builder(PyObject *v) { return PyObject_TypeCheck(v, (PyTypeObject *)BuilderType); }

PyObject *kl_py_body_key(PyObject *v) {
  if (!PyObject_TypeCheck(v, (PyTypeObject *)BuilderType)) return NULL;
  const kl_program *pg = ((BuilderObject *)v)->pg;
  return Py_BuildValue("(sKiii)", "body", (unsigned long long)kl_program_hash(pg), pg->ninputs, pg->neqns,
                       pg->noutputs);
}

static PyModuleDef_Slot mod_slots[] = {{Py_mod_exec, (void *)mod_exec}, {0, NULL}};

static struct PyModuleDef moddef = {PyModuleDef_HEAD_INIT, "kiln._kiln", "kiln's C core.", 0, mod_methods, mod_slots, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__kiln(void) { return PyModuleDef_Init(&moddef); }
