/* A Bloom layer's probes in C, for crawler/backends/bloom.py (BloomLayer): the same bits as
 * its Python loops, which are the specification (tests/test_bloom_probe.py compares them).
 *
 * A key of at least 16 bytes gives h1 = bytes 0-7 and h2 = bytes 8-15 with bit 0 set (both
 * little-endian); probe i reads bit (h1 + i * h2) mod m of octet index >> 3 at bit index & 7,
 * stepped as (h1 mod m) + i (h2 mod m), mod m, an addition at a time: exact for any m, with no
 * division per probe. A shorter key is the caller's (it is stretched first).
 *
 *   contains_many(bits, m, k, keys)  [key in layer for key in keys], or None when a key is
 *                                    shorter than 16 bytes;
 *   add(bits, m, k, key)             sets the key's bits: how many were clear before.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

static uint64_t little_endian(const unsigned char *b) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | b[i];
    return v;
}

/* m and k read, and bits as a buffer of at least ceil(m / 8) octets; 0 with an exception. */
static int layer_of(PyObject *bits, PyObject *m_arg, PyObject *k_arg, int flags, Py_buffer *view,
                    uint64_t *m, Py_ssize_t *k) {
    unsigned long long mv = PyLong_AsUnsignedLongLong(m_arg);
    if (mv == (unsigned long long)-1 && PyErr_Occurred())
        return 0;
    *k = PyLong_AsSsize_t(k_arg);
    if (*k == -1 && PyErr_Occurred())
        return 0;
    if (mv == 0 || *k < 0) {
        PyErr_SetString(PyExc_ValueError, "a Bloom layer needs m >= 1 bits and k >= 0 probes");
        return 0;
    }
    *m = mv;
    if (PyObject_GetBuffer(bits, view, flags) < 0)
        return 0;
    if ((uint64_t)view->len < (*m + 7) / 8) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_ValueError, "the bits are shorter than m");
        return 0;
    }
    return 1;
}

/* idx + step mod m, both below m, without overflow. */
static inline uint64_t step_mod(uint64_t idx, uint64_t step, uint64_t m) {
    return idx >= m - step ? idx - (m - step) : idx + step;
}

static PyObject *contains_many(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 4) {
        PyErr_Format(PyExc_TypeError, "contains_many() takes 4 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *keys = PySequence_Fast(args[3], "contains_many() takes a sequence of keys");
    if (keys == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(keys);
    PyObject **items = PySequence_Fast_ITEMS(keys);
    for (Py_ssize_t j = 0; j < n; j++) {
        if (!PyBytes_Check(items[j])) {
            PyErr_Format(PyExc_TypeError, "a key is bytes, not %.100s", Py_TYPE(items[j])->tp_name);
            Py_DECREF(keys);
            return NULL;
        }
        if (PyBytes_GET_SIZE(items[j]) < 16) {
            Py_DECREF(keys);
            Py_RETURN_NONE;
        }
    }
    Py_buffer view;
    uint64_t m;
    Py_ssize_t k;
    if (!layer_of(args[0], args[1], args[2], PyBUF_SIMPLE, &view, &m, &k)) {
        Py_DECREF(keys);
        return NULL;
    }
    const unsigned char *octets = view.buf;
    PyObject *out = PyList_New(n);
    if (out != NULL) {
        for (Py_ssize_t j = 0; j < n; j++) {
            const unsigned char *key = (const unsigned char *)PyBytes_AS_STRING(items[j]);
            uint64_t idx = little_endian(key) % m, step = (little_endian(key + 8) | 1) % m;
            int present = 1;
            for (Py_ssize_t i = 0; i < k && present; i++, idx = step_mod(idx, step, m))
                present = octets[idx >> 3] >> (idx & 7) & 1;
            PyObject *answer = present ? Py_True : Py_False;
            Py_INCREF(answer);
            PyList_SET_ITEM(out, j, answer);
        }
    }
    PyBuffer_Release(&view);
    Py_DECREF(keys);
    return out;
}

static PyObject *add(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 4) {
        PyErr_Format(PyExc_TypeError, "add() takes 4 arguments (%zd given)", nargs);
        return NULL;
    }
    if (!PyBytes_Check(args[3]) || PyBytes_GET_SIZE(args[3]) < 16) {
        PyErr_SetString(PyExc_TypeError, "add() takes a key of at least 16 bytes");
        return NULL;
    }
    Py_buffer view;
    uint64_t m;
    Py_ssize_t k;
    if (!layer_of(args[0], args[1], args[2], PyBUF_WRITABLE, &view, &m, &k))
        return NULL;
    unsigned char *octets = view.buf;
    const unsigned char *key = (const unsigned char *)PyBytes_AS_STRING(args[3]);
    uint64_t idx = little_endian(key) % m, step = (little_endian(key + 8) | 1) % m;
    long flipped = 0;
    for (Py_ssize_t i = 0; i < k; i++, idx = step_mod(idx, step, m)) {
        unsigned char bit = (unsigned char)(1u << (idx & 7));
        if (!(octets[idx >> 3] & bit)) {
            octets[idx >> 3] |= bit;
            flipped++;
        }
    }
    PyBuffer_Release(&view);
    return PyLong_FromLong(flipped);
}

static PyMethodDef methods[] = {
    {"contains_many", (PyCFunction)(void (*)(void))contains_many, METH_FASTCALL,
     "contains_many(bits, m, k, keys) -> list[bool] | None: each key in the layer (None: a key "
     "is shorter than 16 bytes)."},
    {"add", (PyCFunction)(void (*)(void))add, METH_FASTCALL,
     "add(bits, m, k, key) -> int: set the key's bits; how many were clear."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_bloomprobe",
    "A Bloom layer's probes in C (crawler.backends.bloom.BloomLayer).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__bloomprobe(void) { return PyModule_Create(&module); }
