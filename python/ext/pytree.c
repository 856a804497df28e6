/* pytree.c: the hot half of kiln.tree_util in C: flattening a pytree into its leaves and a
 * structure node, and building one back from a node and leaves. Every jit call flattens its
 * arguments and unflattens its results, and libraries (equinox, flax) flatten more around each
 * call, so this is dispatch time.
 *
 * The structure is tree_util.py's own: a leaf is None; an interior node is the tuple
 * (kind, aux, children) where kind is the container type's _NodeType. The Python module hands
 * over its tables once (tree_setup): the type -> kind dict, the leaf marker, the built-in kinds
 * this file flattens itself (tuple, list, dict, None) and the function that classifies a type
 * seen for the first time; a walk may name another table (tree_util's public view, where
 * boundary types are leaves). Any other kind is flattened and unflattened by its own Python
 * functions, so registered nodes behave exactly as in tree_util.py. */
#include "module.h"

static PyObject *kinds, *is_leaf, *k_tuple, *k_list, *k_dict, *k_none, *classify;
static PyObject *none_node; /* (k_none, None, ()): None's node */

typedef struct {
  PyObject *leaves; /* the list the leaves go to */
  PyObject *stop;   /* the caller's is_leaf(subtree), or NULL */
  PyObject *kinds;  /* the type -> kind table of this walk (tree_util's, or its public view's) */
} walk;

/* kind of x (a new reference), or NULL with an exception */
static PyObject *kind_of(const walk *w, PyObject *x) {
  PyObject *k = PyDict_GetItemWithError(w->kinds, (PyObject *)Py_TYPE(x));
  if (k) return Py_NewRef(k);
  if (PyErr_Occurred()) return NULL;
  return PyObject_CallFunctionObjArgs(classify, (PyObject *)Py_TYPE(x), NULL);
}

static PyObject *flatten(PyObject *x, const walk *w);

/* The node of a container whose children are the items of `seq` (a tuple or list) and aux. */
static PyObject *node_of(PyObject *kind, PyObject *aux, PyObject *seq, const walk *w) {
  int is_list = PyList_Check(seq);
  Py_ssize_t n = is_list ? PyList_Size(seq) : PyTuple_Size(seq);
  if (n < 0) return NULL;
  PyObject *nodes = PyTuple_New(n);
  if (!nodes) return NULL;
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *c = is_list ? PyList_GetItem(seq, i) : PyTuple_GetItem(seq, i); /* borrowed */
    PyObject *node = c ? flatten(c, w) : NULL;
    if (!node) {
      Py_DECREF(nodes);
      return NULL;
    }
    PyTuple_SetItem(nodes, i, node);
  }
  PyObject *t = PyTuple_Pack(3, kind, aux, nodes);
  Py_DECREF(nodes);
  return t;
}

static PyObject *flatten_node(PyObject *x, const walk *w);

/* x's node, its leaves appended to w->leaves */
static PyObject *flatten(PyObject *x, const walk *w) {
  if (Py_EnterRecursiveCall(" while flattening a pytree")) return NULL;
  PyObject *out = flatten_node(x, w);
  Py_LeaveRecursiveCall();
  return out;
}

static PyObject *flatten_node(PyObject *x, const walk *w) {
  if (w->stop) {
    PyObject *r = PyObject_CallFunctionObjArgs(w->stop, x, NULL);
    int yes = r ? PyObject_IsTrue(r) : -1;
    Py_XDECREF(r);
    if (yes < 0) return NULL;
    if (yes) return PyList_Append(w->leaves, x) ? NULL : Py_NewRef(Py_None);
  }
  PyObject *kind, *out = NULL;
  /* (the built-in containers are the same kinds in every table: no lookup) */
  if (PyTuple_CheckExact(x)) kind = Py_NewRef(k_tuple);
  else if (PyList_CheckExact(x)) kind = Py_NewRef(k_list);
  else if (PyDict_CheckExact(x)) kind = Py_NewRef(k_dict);
  else if (x == Py_None) {
    if (!none_node) {
      PyObject *empty = PyTuple_New(0);
      none_node = empty ? PyTuple_Pack(3, k_none, Py_None, empty) : NULL;
      Py_XDECREF(empty);
    }
    return none_node ? Py_NewRef(none_node) : NULL; /* (nodes are immutable: one serves all) */
  } else if (!(kind = kind_of(w, x)))
    return NULL;
  if (kind == is_leaf) {
    Py_DECREF(kind);
    return PyList_Append(w->leaves, x) ? NULL : Py_NewRef(Py_None);
  }
  if (kind == k_tuple || kind == k_list) out = node_of(kind, Py_None, x, w);
  else {
    PyObject *keys = NULL, *vals = NULL, *res = NULL;
    if (kind == k_dict && (keys = PyDict_Keys(x)) && !PyList_Sort(keys)) { /* children in key order */
      Py_ssize_t n = PyList_Size(keys);
      vals = PyList_New(n);
      for (Py_ssize_t i = 0; vals && i < n; i++) {
        PyObject *v = PyDict_GetItemWithError(x, PyList_GetItem(keys, i));
        if (!v) {
          if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "a dict changed while it was flattened");
          Py_CLEAR(vals);
          break;
        }
        PyList_SetItem(vals, i, Py_NewRef(v));
      }
      PyObject *aux = vals ? PyList_AsTuple(keys) : NULL;
      if (aux) out = node_of(kind, aux, vals, w);
      Py_XDECREF(aux);
    } else if (kind != k_dict || keys) { /* a registered node, or dict keys that do not sort */
      PyErr_Clear();                      /* (the Python flatten raises the message for those) */
      res = PyObject_CallMethod(kind, "flatten", "(O)", x);
      PyObject *children = NULL, *aux = NULL;
      if (res && (!PyTuple_Check(res) || PyTuple_Size(res) != 2)) {
        PyErr_Format(PyExc_TypeError, "the flatten function of pytree node %R must return (children, aux_data)", kind);
      } else if (res) {
        children = PyTuple_GetItem(res, 0);
        aux = PyTuple_GetItem(res, 1);
        PyObject *seq = PyTuple_Check(children) || PyList_Check(children) ? Py_NewRef(children) : PySequence_Tuple(children);
        if (seq) out = node_of(kind, aux, seq, w);
        Py_XDECREF(seq);
      }
    }
    Py_XDECREF(keys);
    Py_XDECREF(vals);
    Py_XDECREF(res);
  }
  Py_DECREF(kind);
  return out;
}

static PyObject *unflatten_node(PyObject *node, PyObject *leaves, Py_ssize_t *at);

static PyObject *unflatten(PyObject *node, PyObject *leaves, Py_ssize_t *at) {
  if (Py_EnterRecursiveCall(" while unflattening a pytree")) return NULL;
  PyObject *out = unflatten_node(node, leaves, at);
  Py_LeaveRecursiveCall();
  return out;
}

static PyObject *unflatten_node(PyObject *node, PyObject *leaves, Py_ssize_t *at) {
  if (node == Py_None) {
    PyObject *v = PyList_Check(leaves) ? PyList_GetItem(leaves, *at) : PyTuple_GetItem(leaves, *at);
    if (!v) return NULL;
    ++*at;
    return Py_NewRef(v);
  }
  PyObject *kind = PyTuple_GetItem(node, 0), *aux = PyTuple_GetItem(node, 1), *nodes = PyTuple_GetItem(node, 2);
  if (!kind || !aux || !nodes) return NULL;
  Py_ssize_t n = PyTuple_Size(nodes);
  if (kind == k_none) return Py_NewRef(Py_None);
  PyObject *vals = kind == k_tuple ? PyTuple_New(n) : PyList_New(n);
  for (Py_ssize_t i = 0; vals && i < n; i++) {
    PyObject *v = unflatten(PyTuple_GetItem(nodes, i), leaves, at);
    if (!v) Py_CLEAR(vals);
    else if (kind == k_tuple) PyTuple_SetItem(vals, i, v);
    else PyList_SetItem(vals, i, v);
  }
  if (!vals || kind == k_tuple || kind == k_list) return vals;
  PyObject *out = NULL;
  if (kind == k_dict) {
    out = PyDict_New();
    for (Py_ssize_t i = 0; out && i < n; i++)
      if (PyDict_SetItem(out, PyTuple_GetItem(aux, i), PyList_GetItem(vals, i))) Py_CLEAR(out);
  } else
    out = PyObject_CallMethod(kind, "unflatten", "(OO)", aux, vals);
  Py_DECREF(vals);
  return out;
}

static PyObject *mod_tree_setup(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *a[7];
  if (!PyArg_ParseTuple(args, "O!OOOOOO:tree_setup", &PyDict_Type, &a[0], &a[1], &a[2], &a[3], &a[4], &a[5], &a[6]))
    return NULL;
  PyObject **slots[7] = {&kinds, &is_leaf, &k_tuple, &k_list, &k_dict, &k_none, &classify};
  Py_CLEAR(none_node);
  for (int i = 0; i < 7; i++) {
    PyObject *old = *slots[i];
    *slots[i] = Py_NewRef(a[i]);
    Py_XDECREF(old);
  }
  Py_RETURN_NONE;
}

static PyObject *mod_tree_flatten(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *x, *leaves, *stop = Py_None, *table = NULL;
  if (!PyArg_ParseTuple(args, "OO!|OO!:tree_flatten", &x, &PyList_Type, &leaves, &stop, &PyDict_Type, &table)) return NULL;
  if (!kinds) return PyErr_Format(PyExc_RuntimeError, "tree_flatten: tree_setup was not called");
  walk w = {leaves, stop == Py_None ? NULL : stop, table ? table : kinds};
  return flatten(x, &w);
}

static PyObject *mod_tree_unflatten(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *node, *leaves;
  if (!PyArg_ParseTuple(args, "OO:tree_unflatten", &node, &leaves)) return NULL;
  if (!kinds) return PyErr_Format(PyExc_RuntimeError, "tree_unflatten: tree_setup was not called");
  if (!PyList_Check(leaves) && !PyTuple_Check(leaves)) return PyErr_Format(PyExc_TypeError, "tree_unflatten: leaves must be a list or tuple");
  Py_ssize_t at = 0;
  return unflatten(node, leaves, &at);
}

/* A hash of structure node `node` that agrees with == on nodes: the kinds (by identity), the
 * children and, for dicts, their keys. Other aux_data is left out, as JAX's PyTreeDef hash leaves
 * node data out: a library's aux_data can take microseconds to hash (flax's GraphDef), and jit
 * hashes its arguments' structure on every call; == still compares it. -1 with an error. */
static Py_hash_t node_hash(PyObject *node) {
  if (node == is_leaf) return 0x2545F491;
  if (!PyTuple_Check(node) || PyTuple_Size(node) != 3 || !PyTuple_Check(PyTuple_GetItem(node, 2)))
    return PyObject_Hash(node);
  PyObject *kind = PyTuple_GetItem(node, 0), *children = PyTuple_GetItem(node, 2);
  Py_uhash_t h = (Py_uhash_t)((uintptr_t)kind >> 4) * 1000003u;
  if (kind == k_dict) {
    Py_hash_t a = PyObject_Hash(PyTuple_GetItem(node, 1));
    if (a == -1) return -1;
    h = (h ^ (Py_uhash_t)a) * 1000003u;
  }
  Py_ssize_t n = PyTuple_Size(children);
  h ^= (Py_uhash_t)n;
  if (Py_EnterRecursiveCall(" while hashing a pytree structure")) return -1;
  for (Py_ssize_t i = 0; i < n; i++) {
    Py_hash_t c = node_hash(PyTuple_GetItem(children, i));
    if (c == -1) {
      Py_LeaveRecursiveCall();
      return -1;
    }
    h = (h * 1000003u) ^ (Py_uhash_t)c;
  }
  Py_LeaveRecursiveCall();
  return h == (Py_uhash_t)-1 ? -2 : (Py_hash_t)h;
}

static PyObject *mod_tree_hash(PyObject *self, PyObject *node) {
  (void)self;
  if (!kinds) return PyErr_Format(PyExc_RuntimeError, "tree_hash: tree_setup was not called");
  Py_hash_t h = node_hash(node);
  return h == -1 ? NULL : PyLong_FromSsize_t(h);
}

static PyMethodDef pytree_methods[] = {
    {"tree_setup", mod_tree_setup, METH_VARARGS,
     "tree_setup(kinds, leaf_marker, tuple_kind, list_kind, dict_kind, none_kind, classify): tree_util's tables"},
    {"tree_flatten", mod_tree_flatten, METH_VARARGS,
     "tree_flatten(x, leaves, is_leaf=None, kinds=None) -> node: appends x's leaves to leaves (is_leaf(subtree) "
     "stops the descent; kinds: the type table, tree_setup's by default)"},
    {"tree_unflatten", mod_tree_unflatten, METH_VARARGS, "tree_unflatten(node, leaves) -> the pytree (leaves in order)"},
    {"tree_hash", mod_tree_hash, METH_O, "tree_hash(node) -> hash of the structure (dict keys, not other aux_data)"},
    {NULL, NULL, 0, NULL}};

int kl_py_pytree_init(PyObject *m) { return PyModule_AddFunctions(m, pytree_methods); }
