#include "portable.h"
#include "../tcde_borrowed_dims.h"

/* ------------------------------------------------------------------------ */
/* Non-owning export                                                        */
/* ------------------------------------------------------------------------ */

/* The shape and strides handed out live as long as the tensor object (see
 * csrc/tcde_borrowed_dims.h): every DLTensor of f(x, x) stays valid until the consumer
 * returns to Python. */
int DLTensorFromPyObjectNoSync(void* py_obj, DLTensor* out) {
  if (out == NULL) {
    PyErr_Format(PyExc_ValueError, "%s: dltensor_from_py_object_no_sync: out is NULL", kLib);
    return -1;
  }
  const State* s = GetState();
  if (s == NULL) return -1;
  PyObject* obj = (PyObject*)py_obj;
  DLManagedTensorVersioned* managed = ExportTensor(s, obj, 0);
  if (managed == NULL) return -1;
  const DLTensor* dl = &managed->dl_tensor;
  const int64_t* dims = TcdeBorrowedDims(s->dims_cache, obj, dl);
  if (dims == NULL) {
    DeleteManaged(managed);
    return -1;
  }
  /* Non-owning: data stays valid while the caller holds the object and does not
   * change its metadata (the native table's promise); the export is dropped. */
  out->data = dl->data;
  out->device = dl->device;
  out->ndim = dl->ndim;
  out->dtype = dl->dtype;
  out->shape = (int64_t*)dims;
  out->strides = (int64_t*)dims + dl->ndim;
  out->byte_offset = dl->byte_offset;
  DeleteManaged(managed);
  return 0;
}

