/* Which thread calls: how a compiled timer call tells threads apart, cheaply and for good.
 *
 * `threading.get_ident()` makes a new int on every call, and every timer call asks twice.
 * `key()` returns the calling thread state's unique id (`PyThreadState_GetID`): a counter the
 * interpreter gives each thread state it creates, never reused while the process lives (an
 * ident, or the address of an object of the thread, can be taken again by a thread started
 * after this one exited). The first 256 of them are cached small ints: no allocation.
 *
 * `now_in()` and `now_plain()` ask that question and read the clock in one call: a timer
 * call's checks and its reading, which would take the compiled core three calls through
 * the interpreter's call protocol, each of them more than the work it calls.
 *
 * The module needs the GIL (`Py_mod_gil`): looptrace's timer calls take no lock and rely on
 * it (looptrace/_core/cpython.py lists what looptrace assumes of CPython).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* The calling thread state's unique id. */
static unsigned long long
calling_id(void)
{
    return (unsigned long long)PyThreadState_GetID(PyThreadState_Get());
}

static PyObject *
key(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    return PyLong_FromUnsignedLongLong(calling_id());
}

/* The key decoded last: a timer call passes its thread state's key, the same int object
 * call after call, so its value is decoded once, not at every call. */
typedef struct {
    PyObject *key; /* a strong reference, or NULL */
    unsigned long long id; /* the key's value */
} decoded;

/* 1 if `key` (an int from `key()`) is the calling thread's, 0 if not, -1 on error. */
static int
is_here(PyObject *module, PyObject *key)
{
    decoded *last = PyModule_GetState(module);
    if (key != last->key) {
        unsigned long long id = PyLong_AsUnsignedLongLong(key);
        if (id == (unsigned long long)-1 && PyErr_Occurred()) {
            return -1;
        }
        Py_INCREF(key);
        Py_XSETREF(last->key, key);
        last->id = id;
    }
    return last->id == calling_id();
}

/* Return `func()`. A builtin that takes no arguments (`time.perf_counter_ns`, asyncio's
 * `_get_running_loop`) is called directly, as its own call protocol would call it; any other
 * callable (a test's clock) through the protocol. */
static PyObject *
call_without_arguments(PyObject *func)
{
    if (PyCFunction_CheckExact(func) && PyCFunction_GET_FLAGS(func) == METH_NOARGS) {
        return PyCFunction_GET_FUNCTION(func)(PyCFunction_GET_SELF(func), NULL);
    }
    return PyObject_CallNoArgs(func);
}

/* `clock()` when called in the thread of `args[0]`, else None; with a third argument, also
 * None while `args[2]()` (asyncio's running loop) is not None. `name` and `expected` (2 or 3)
 * say which of the two calls below this is. */
static PyObject *
reading(PyObject *module, PyObject *const *args, Py_ssize_t count, const char *name,
        Py_ssize_t expected)
{
    if (count != expected) {
        PyErr_Format(PyExc_TypeError, "%s() takes %zd arguments (%zd given)", name, expected,
                     count);
        return NULL;
    }
    int here = is_here(module, args[0]);
    if (here <= 0) {
        return here < 0 ? NULL : Py_NewRef(Py_None);
    }
    if (expected == 3) {
        PyObject *loop = call_without_arguments(args[2]);
        if (loop == NULL) {
            return NULL;
        }
        int running = loop != Py_None;
        Py_DECREF(loop);
        if (running) {
            return Py_NewRef(Py_None);
        }
    }
    return call_without_arguments(args[1]);
}

/* now_in(key, clock): `clock()` when called in the thread of `key`, else None. */
static PyObject *
now_in(PyObject *module, PyObject *const *args, Py_ssize_t count)
{
    return reading(module, args, count, "now_in", 2);
}

/* now_plain(key, clock, running_loop): as `now_in`, and None while `running_loop()` is not
 * None (an asyncio event loop runs in the thread). */
static PyObject *
now_plain(PyObject *module, PyObject *const *args, Py_ssize_t count)
{
    return reading(module, args, count, "now_plain", 3);
}

static PyMethodDef methods[] = {
    {"key", key, METH_NOARGS, "Return the calling thread state's unique id."},
    {"now_in", (PyCFunction)(void (*)(void))now_in, METH_FASTCALL,
     "now_in(key, clock): clock() when called in the thread of key, else None."},
    {"now_plain", (PyCFunction)(void (*)(void))now_plain, METH_FASTCALL,
     "now_plain(key, clock, running_loop): now_in(key, clock), None while a loop runs."},
    {NULL, NULL, 0, NULL},
};

static int
traverse(PyObject *module, visitproc visit, void *arg)
{
    decoded *last = PyModule_GetState(module);
    Py_VISIT(last->key);
    return 0;
}

static int
clear(PyObject *module)
{
    decoded *last = PyModule_GetState(module);
    Py_CLEAR(last->key);
    return 0;
}

static void
free_module(void *module)
{
    clear((PyObject *)module);
}

static PyModuleDef_Slot slots[] = {
#ifdef Py_mod_gil
    /* A free-threaded build enables the GIL when it imports this module (unless told not to,
     * and then looptrace's configure() refuses to run). */
    {Py_mod_gil, Py_MOD_GIL_USED},
#endif
    {0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "looptrace._core._threaddict",
    .m_doc = "The calling thread state's unique id, for telling threads apart cheaply.",
    .m_size = sizeof(decoded),
    .m_methods = methods,
    .m_slots = slots,
    .m_traverse = traverse,
    .m_clear = clear,
    .m_free = free_module,
};

PyMODINIT_FUNC
PyInit__threaddict(void)
{
    return PyModuleDef_Init(&module);
}
