/* SimHash's vote in C, for crawler/content/simhash.py (fingerprint): bit j of the answer is set
 * when the features whose 64-bit hash has bit j set weigh more than half of the total weight.
 * simhash._fingerprint_pure and the numpy path are the specification
 * (tests/test_simhash.py compares them).
 *
 *   majority(hashes, weights)  hashes: ints in [0, 2**64); weights: ints in [0, 2**62), the
 *                              same count; the total below 2**62.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

static PyObject *majority(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "majority() takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *hashes = PySequence_Fast(args[0], "majority() takes a sequence of hashes");
    if (hashes == NULL)
        return NULL;
    PyObject *weights = PySequence_Fast(args[1], "majority() takes a sequence of weights");
    if (weights == NULL) {
        Py_DECREF(hashes);
        return NULL;
    }
    PyObject *out = NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(hashes);
    if (PySequence_Fast_GET_SIZE(weights) != n) {
        PyErr_SetString(PyExc_ValueError, "majority() takes as many weights as hashes");
        goto done;
    }
    uint64_t sums[64] = {0}, total = 0;
    PyObject **h = PySequence_Fast_ITEMS(hashes), **w = PySequence_Fast_ITEMS(weights);
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned long long hash = PyLong_AsUnsignedLongLong(h[i]);
        if (hash == (unsigned long long)-1 && PyErr_Occurred())
            goto done;
        long long weight = PyLong_AsLongLong(w[i]);
        if (weight == -1 && PyErr_Occurred())
            goto done;
        if (weight < 0 || (uint64_t)weight >= ((uint64_t)1 << 62) - total) {
            PyErr_SetString(PyExc_ValueError,
                            "majority() takes weights >= 0 totalling below 2**62");
            goto done;
        }
        total += (uint64_t)weight;
        for (int j = 0; j < 64; j++) /* no branch on the bits: they are coin flips */
            sums[j] += (uint64_t)weight & (uint64_t)0 - (hash >> j & 1);
    }
    uint64_t half = total >> 1, value = 0;
    for (int j = 0; j < 64; j++)
        if (sums[j] > half)
            value |= (uint64_t)1 << j;
    out = PyLong_FromUnsignedLongLong(value);
done:
    Py_DECREF(hashes);
    Py_DECREF(weights);
    return out;
}

static PyMethodDef methods[] = {
    {"majority", (PyCFunction)(void (*)(void))majority, METH_FASTCALL,
     "majority(hashes, weights) -> int: SimHash's vote (crawler.content.simhash.fingerprint)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_majority",
    "SimHash's vote in C (crawler.content.simhash.fingerprint).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__majority(void) { return PyModule_Create(&module); }
