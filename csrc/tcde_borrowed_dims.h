/* The shape and strides a non-owning export hands out (dltensor_from_py_object_no_sync),
 * kept valid as long as the tensor object lives: shared by both tables, for the tensors
 * whose shape and strides are not the C++ tensor's own arrays (the portable table's every
 * export; the native table's tensors whose sizes or strides Python answers).
 *
 * Include after Python.h and dlpack.h. The cache is a dict the caller makes once and
 * keeps (GIL held). C11 and C++. */
#ifndef TCDE_BORROWED_DIMS_H_
#define TCDE_BORROWED_DIMS_H_

#include <stdlib.h>
#include <string.h>

/* The shape and strides handed out by dltensor_from_py, kept alive as long as
 * the tensor object: an entry of State.dims_cache, keyed by id(tensor) and
 * removed by a weakref callback when the tensor dies. An entry holds every
 * distinct shape and strides the table has handed out for that tensor, never
 * one of them freed before the tensor dies: dlpack.h keeps a DLTensor valid
 * "until control is returned", and a consumer converting f(x, x) may hold the
 * first while it asks for the second, whose strides a subclass or a metadata
 * change made differ. Memory stays flat however often a tensor is exported
 * with the same metadata and however many short-lived tensors are; a live
 * tensor whose metadata keeps changing keeps one small array per distinct
 * shape until it dies (docs/import.md, "Lifetimes"). */
typedef struct {
  int32_t ndim;
  int64_t dims[]; /* shape, then strides */
} TcdeDims;

static void FreeDimsCapsule(PyObject* capsule) {
  free(PyCapsule_GetPointer(capsule, "tcde_dims"));
}

/* Free-threaded builds: one lock orders every look-up, insertion and removal of
 * State.dims_cache entries. Without it two threads making the first non-owning
 * export of the same tensor at once each insert an entry, and the second
 * insertion frees the TcdeDims the first thread has just handed out (its caller then
 * reads freed shape and strides); a late weakref callback could likewise remove
 * the entry of a newer object at the same address between its check and its
 * delete. Nothing in the locked sections runs Python code (int keys, tuples,
 * capsules, weakrefs: no __eq__, no callback, no eval breaker), so no thread
 * can wait on it while holding it; PyMutex_Lock detaches the thread state while
 * it waits, so a stop-the-world pause never waits on it either. GIL builds need
 * no lock: nothing there releases the GIL between the check and the insertion. */
#if defined(Py_GIL_DISABLED)
static PyMutex g_dims_lock;
#define TCDE_DIMS_LOCK() PyMutex_Lock(&g_dims_lock)
#define TCDE_DIMS_UNLOCK() PyMutex_Unlock(&g_dims_lock)
#else
#define TCDE_DIMS_LOCK() ((void)0)
#define TCDE_DIMS_UNLOCK() ((void)0)
#endif

/* The entry of `key` in dims_cache (a new reference), NULL if none; -1 on error. */
static int DimsEntry(PyObject* cache, PyObject* key, PyObject** entry) {
#if defined(Py_GIL_DISABLED)
  return PyDict_GetItemRef(cache, key, entry) < 0 ? -1 : 0;
#else
  *entry = PyDict_GetItemWithError(cache, key);
  if (*entry == NULL && PyErr_Occurred()) return -1;
  Py_XINCREF(*entry);
  return 0;
#endif
}

/* The weakref callback: self is (cache, key); removes the entry if it still belongs
 * to this weakref (the entry may have been replaced by then). */
static PyObject* DropDims(PyObject* self, PyObject* weakref) {
  PyObject* cache = PyTuple_GetItem(self, 0);
  PyObject* key = PyTuple_GetItem(self, 1);
  if (cache == NULL || key == NULL) return NULL;
  PyObject* entry = NULL;
  TCDE_DIMS_LOCK();
  int rc = DimsEntry(cache, key, &entry);
  const int ours = entry != NULL && PyTuple_GetItem(entry, 0) == weakref;
  /* The dict still holds the entry: dropping this reference frees nothing. */
  Py_XDECREF(entry);
  if (rc == 0 && ours && PyDict_DelItem(cache, key) != 0) {
    if (PyErr_ExceptionMatches(PyExc_KeyError)) {
      PyErr_Clear();
    } else {
      rc = -1;
    }
  }
  TCDE_DIMS_UNLOCK();
  if (rc != 0) return NULL;
  Py_RETURN_NONE;
}

static PyMethodDef kDropDimsDef = {"_tcde_drop_dims", (PyCFunction)(void (*)(void))DropDims,
                                   METH_O, NULL};

/* Whether `entry` belongs to `obj` (its weakref still points to it: an id is reused only
 * after the old object died and its callback ran, but be sure). No error set. */
static int EntryIsFor(PyObject* entry, PyObject* obj) {
  PyObject* weakref = PyTuple_GetItem(entry, 0);
  PyObject* referent = NULL;
#if PY_VERSION_HEX >= 0x030D0000 && (!defined(Py_LIMITED_API) || Py_LIMITED_API >= 0x030D0000)
  if (PyWeakref_GetRef(weakref, &referent) < 0) PyErr_Clear();
  Py_XDECREF(referent); /* only compared: obj itself is held by the caller */
#else
  referent = PyWeakref_GetObject(weakref); /* borrowed */
#endif
  return referent == obj;
}

/* The TcdeDims of `entry` (one of `obj`'s) that equal `dl`'s shape and strides, the latest
 * first; NULL (no error set) if none does. */
static const TcdeDims* MatchingDims(PyObject* entry, const DLTensor* dl) {
  PyObject* versions = PyTuple_GetItem(entry, 1);
  const int32_t ndim = dl->ndim;
  for (Py_ssize_t i = PyList_Size(versions) - 1; i >= 0; --i) {
    const TcdeDims* dims =
        (const TcdeDims*)PyCapsule_GetPointer(PyList_GetItem(versions, i), "tcde_dims");
    if (dims == NULL) {
      PyErr_Clear();
      continue;
    }
    if (dims->ndim != ndim) continue;
    if (ndim > 0 && (memcmp(dims->dims, dl->shape, (size_t)ndim * sizeof(int64_t)) != 0 ||
                     memcmp(dims->dims + ndim, dl->strides, (size_t)ndim * sizeof(int64_t)) != 0)) {
      continue;
    }
    return dims;
  }
  return NULL;
}

/* A capsule owning a copy of `dl`'s shape and strides (*dims), or NULL with an error. */
static PyObject* NewDimsCapsule(const DLTensor* dl, const TcdeDims** out) {
  const int32_t ndim = dl->ndim;
  TcdeDims* dims = (TcdeDims*)malloc(sizeof(TcdeDims) + 2 * (size_t)ndim * sizeof(int64_t));
  if (dims == NULL) {
    PyErr_NoMemory();
    return NULL;
  }
  dims->ndim = ndim;
  for (int32_t i = 0; i < ndim; ++i) {
    dims->dims[i] = dl->shape[i];
    dims->dims[ndim + i] = dl->strides[i];
  }
  PyObject* capsule = PyCapsule_New(dims, "tcde_dims", &FreeDimsCapsule);
  if (capsule == NULL) {
    free(dims);
    return NULL;
  }
  *out = dims;
  return capsule;
}

/* The cached dims of `obj` equal to `dl`'s shape and strides, else a copy added to its
 * entry (made on its first export); NULL with a Python error set on failure. The TcdeDims
 * stay in the dict (so the pointer stays valid) while obj lives. */
static const TcdeDims* TcdeDimsFor(PyObject* cache, PyObject* obj, const DLTensor* dl) {
  PyObject* key = PyLong_FromVoidPtr(obj);
  if (key == NULL) return NULL;
  PyObject* entry = NULL;
  const TcdeDims* found = NULL;
  int ours = 0;
  TCDE_DIMS_LOCK();
  int rc = DimsEntry(cache, key, &entry);
  if (entry != NULL) {
    ours = EntryIsFor(entry, obj);
    if (ours) found = MatchingDims(entry, dl);
  }
  TCDE_DIMS_UNLOCK();
  Py_XDECREF(entry);
  if (rc != 0 || found != NULL) {
    Py_DECREF(key);
    return found;
  }
  const TcdeDims* dims = NULL;
  PyObject* capsule = NewDimsCapsule(dl, &dims);
  if (capsule == NULL) {
    Py_DECREF(key);
    return NULL;
  }
  /* A new entry, made outside the lock (weakrefs and lists allocate), unless obj has one. */
  PyObject* value = NULL;
  if (!ours) {
    PyObject* bound = PyTuple_Pack(2, cache, key);
    PyObject* callback = bound == NULL ? NULL : PyCFunction_NewEx(&kDropDimsDef, bound, NULL);
    Py_XDECREF(bound);
    PyObject* weakref = callback == NULL ? NULL : PyWeakref_NewRef(obj, callback);
    Py_XDECREF(callback);
    PyObject* versions = weakref == NULL ? NULL : PyList_New(0);
    value = versions == NULL ? NULL : PyTuple_Pack(2, weakref, versions);
    Py_XDECREF(weakref);
    Py_XDECREF(versions);
    if (value == NULL) {
      Py_DECREF(capsule);
      Py_DECREF(key);
      return NULL;
    }
  }
  /* Another thread may have added the same dims meanwhile: use those, never replace
   * them (they may be in use already). An entry of another object at this id (dead: its
   * callback has not run yet) is replaced; nothing of a dead object is in use. */
  const TcdeDims* result = dims;
  entry = NULL;
  TCDE_DIMS_LOCK();
  rc = DimsEntry(cache, key, &entry);
  if (rc == 0 && entry != NULL && EntryIsFor(entry, obj)) {
    found = MatchingDims(entry, dl);
    if (found != NULL) {
      result = found;
    } else if (PyList_Append(PyTuple_GetItem(entry, 1), capsule) != 0) {
      result = NULL;
    }
  } else if (rc != 0 || value == NULL ||
             PyList_Append(PyTuple_GetItem(value, 1), capsule) != 0 ||
             PyDict_SetItem(cache, key, value) != 0) {
    /* (value NULL: obj had an entry a moment ago and has none now, which only its death
     * could cause, and the caller holds it.) */
    if (rc == 0 && value == NULL) {
      PyErr_SetString(PyExc_RuntimeError, "the cached shape of a live tensor vanished");
    }
    result = NULL;
  }
  TCDE_DIMS_UNLOCK();
  /* Outside the lock: dropping an unused entry, or the replaced one's last
   * reference, frees its weakref (no callback: the weakref dies first). */
  Py_XDECREF(entry);
  Py_XDECREF(value);
  Py_DECREF(capsule);
  Py_DECREF(key);
  return result;
}

/* The shape (then, at +ndim, the strides) to hand out for `obj`'s export `dl`: equal to
 * dl's, valid while `obj` lives; NULL with a Python error set on failure. GIL held. */
static inline const int64_t* TcdeBorrowedDims(PyObject* cache, PyObject* obj,
                                              const DLTensor* dl) {
  const TcdeDims* dims = TcdeDimsFor(cache, obj, dl);
  return dims == NULL ? NULL : dims->dims;
}

#endif /* TCDE_BORROWED_DIMS_H_ */
