/* batch_rule.c: user batching rules for vmap (jax.custom_batching.custom_vmap, library primitives'
 * batching rules). A custom_vmap_call equation names its rule by a handle; when the vmap pass
 * meets one with a batched operand it calls kl_user_batch_fn (transforms/batching.h), which this
 * file answers by calling the Python handler kiln._src.primitive installs:
 *   handler(rule, [(shape, dtype name)], [batched], size) -> (Builder, [out batched])
 * The handler traces the rule on the batched operand types into a program. An exception it raises
 * stays set, so the vmap call in Python raises it as it was (builder_vmap keeps a pending one). */
#include "module.h"

static PyObject *batch_handler; /* kiln._src.primitive._run_batch_rule, or NULL */

static kl_program *py_user_batch(int64_t rule, int nin, const kl_aval *ins, const char *in_batched, int64_t size,
                                 char *out_batched, char *err, size_t errlen) {
  PyObject *avals = PyList_New(nin), *flags = PyList_New(nin);
  for (int i = 0; avals && flags && i < nin; i++) {
    PyObject *shape = PyTuple_New(ins[i].ndim);
    for (int d = 0; shape && d < ins[i].ndim; d++) PyTuple_SetItem(shape, d, PyLong_FromLongLong(ins[i].dims[d]));
    PyObject *item = shape ? Py_BuildValue("(Os)", shape, kl_dtype_name(ins[i].dtype)) : NULL;
    Py_XDECREF(shape);
    if (!item) {
      Py_CLEAR(avals);
      break;
    }
    PyList_SetItem(avals, i, item);
    PyList_SetItem(flags, i, PyBool_FromLong(in_batched[i]));
  }
  PyObject *res = avals && flags && batch_handler
                      ? PyObject_CallFunction(batch_handler, "LOOL", (long long)rule, avals, flags, (long long)size)
                      : NULL;
  Py_XDECREF(avals);
  Py_XDECREF(flags);
  kl_program *pg = NULL;
  PyObject *builder = NULL, *outs = NULL;
  if (res && (!PyArg_ParseTuple(res, "OO", &builder, &outs) || !(pg = kl_py_builder_program(builder)))) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "vmap: a batching rule handler must return (Builder, flags)");
  } else if (res) {
    PyObject *t = PySequence_Tuple(outs);
    if (!t || PyTuple_Size(t) != pg->noutputs || pg->noutputs > KL_MAX_OUTS) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "vmap: a batching rule's out flags do not match its program");
      pg = NULL;
    } else {
      for (int i = 0; i < pg->noutputs; i++) out_batched[i] = (char)PyObject_IsTrue(PyTuple_GetItem(t, i));
      kl_program_retain(pg);
    }
    Py_XDECREF(t);
  }
  Py_XDECREF(res);
  if (!pg) kl_error(err, errlen, KL_ERR_INTERNAL, "vmap: a user batching rule failed (its Python exception follows)");
  return pg;
}

static PyObject *mod_set_batch_handler(PyObject *self, PyObject *fn) {
  (void)self;
  if (!PyCallable_Check(fn)) return PyErr_Format(PyExc_TypeError, "set_batch_handler: expects a callable");
  PyObject *old = batch_handler;
  batch_handler = Py_NewRef(fn);
  Py_XDECREF(old);
  kl_set_user_batch_fn(py_user_batch);
  Py_RETURN_NONE;
}

static PyMethodDef batch_rule_methods[] = {
    {"set_batch_handler", mod_set_batch_handler, METH_O,
     "set_batch_handler(fn): fn(rule, avals, batched, size) -> (Builder, out_batched) answers vmap for custom_vmap_call"},
    {NULL, NULL, 0, NULL}};

int kl_py_batch_rule_init(PyObject *m) { return PyModule_AddFunctions(m, batch_rule_methods); }
