/* The calling thread's dictionary: how a compiled timer call tells which thread runs it.
 *
 * `threading.get_ident()` makes a new int on every call, and every timer call asks twice.
 * This returns an object the interpreter keeps anyway: the thread's state dictionary
 * (`PyThreadState_GetDict`), which lives exactly as long as the thread's Python state.
 * looptrace compares its address and never keeps a reference to it: the dictionary is freed
 * when its thread exits, and that is what releases the thread's `threading.local` data.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static PyObject *
current(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    PyObject *dictionary = PyThreadState_GetDict(); /* borrowed; made on first use */
    if (dictionary == NULL) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_RuntimeError, "the calling thread has no state dictionary");
        }
        return NULL;
    }
    Py_INCREF(dictionary);
    return dictionary;
}

static PyMethodDef methods[] = {
    {"current", current, METH_NOARGS, "Return the calling thread's state dictionary."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "looptrace._core._threaddict",
    .m_doc = "The calling thread's state dictionary, for telling threads apart cheaply.",
    .m_size = 0,
    .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__threaddict(void)
{
    return PyModuleDef_Init(&module);
}
