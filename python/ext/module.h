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

/* array.c: ArrayBase, the C half of kiln.Array (its fields, the buffer protocol, and the eager
 * fast path of + - * /); adds ArrayBase and eager_setup to the module. */
int kl_py_array_init(PyObject *module);
/* Computes every pending eager result (before memory is shared with another library, which may
 * write it). 0, or -1 with an exception. */
int kl_py_eager_flush(void);

#endif
