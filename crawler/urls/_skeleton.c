/* The page's tags as a skeleton, in C, for the depth proof of crawler/urls/pagebounds.py:
 * tokens(markup) is its _SKELETON.findall(markup), token for token, and foreign(markup) its
 * _FOREIGN.search(markup) is not None (tests/test_pagebounds_skeleton.py compares them on
 * generated and real markup). The regular expressions are the specification; this is the
 * same reading of each "<" in one pass without backtracking (every quantifier of the pattern
 * is possessive or decided by one character), at a fifth of sre's cost or less.
 *
 * At each "<", in the pattern's order:
 *   "!"   a comment that holds no "<" up to its end (<!-->, <!--->, --> or --!>): consumes "<!";
 *   name  "/"? an ASCII letter, [A-Za-z0-9:._-]*, then attributes (whitespace or "/", a name,
 *         optionally "=" and a quoted value holding no "<" or ">" or an unquoted one), then
 *         whitespace or "/" and ">": consumes "<" and the name, "/" included;
 *   ""    the next character is a letter, "!", "/" or "?": consumes "<";
 *   else  no token; the search goes on after the "<".
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

typedef struct {
    int kind;
    const void *data;
    Py_ssize_t n;
} Text;

static inline Py_UCS4 at(const Text *t, Py_ssize_t i) {
    return i < t->n ? PyUnicode_READ(t->kind, t->data, i) : 0xFFFFFFFF;
}

static inline int ascii_letter(Py_UCS4 c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
}

static inline int name_char(Py_UCS4 c) { /* [A-Za-z0-9:._-] */
    return ascii_letter(c) || (c >= '0' && c <= '9') || c == ':' || c == '.' || c == '_' ||
           c == '-';
}

static inline int space(Py_UCS4 c) { /* [\t\n\f\r ] */
    return c == '\t' || c == '\n' || c == '\f' || c == '\r' || c == ' ';
}

static inline int space_or_slash(Py_UCS4 c) { return space(c) || c == '/'; }

static inline int attribute_name_char(Py_UCS4 c) { /* [^\t\n\f\r /<>"'=] */
    return c != 0xFFFFFFFF && !space_or_slash(c) && c != '<' && c != '>' && c != '"' &&
           c != '\'' && c != '=';
}

static inline int unquoted_char(Py_UCS4 c) { /* [^\t\n\f\r <>"'=`] */
    return c != 0xFFFFFFFF && !space(c) && c != '<' && c != '>' && c != '"' && c != '\'' &&
           c != '=' && c != '`';
}

/* (?=!--(?:-?>|[^<]*?--!?>)) at i (the character after "<"). */
static int clean_comment(const Text *t, Py_ssize_t i) {
    if (at(t, i) != '!' || at(t, i + 1) != '-' || at(t, i + 2) != '-')
        return 0;
    Py_ssize_t j = i + 3;
    if (at(t, j) == '>' || (at(t, j) == '-' && at(t, j + 1) == '>'))
        return 1;
    for (Py_ssize_t k = j;; k++) {
        if (at(t, k) == '-' && at(t, k + 1) == '-' &&
            (at(t, k + 2) == '>' || (at(t, k + 2) == '!' && at(t, k + 3) == '>')))
            return 1;
        Py_UCS4 c = at(t, k);
        if (c == '<' || c == 0xFFFFFFFF)
            return 0;
    }
}

/* The attributes and the closing ">" after a tag name ending at p: the pattern's lookahead. */
static int tag_ends(const Text *t, Py_ssize_t p) {
    for (;;) { /* (?: [ws/]++ name++ (?: ws* = ws* value )?+ )*+ */
        Py_ssize_t r = p;
        while (space_or_slash(at(t, r)))
            r++;
        if (r == p)
            break;
        Py_ssize_t name = r;
        while (attribute_name_char(at(t, r)))
            r++;
        if (r == name)
            break;
        Py_ssize_t v = r;
        while (space(at(t, v)))
            v++;
        if (at(t, v) == '=') {
            v++;
            while (space(at(t, v)))
                v++;
            Py_UCS4 q = at(t, v);
            if (q == '"' || q == '\'') {
                Py_ssize_t e = v + 1;
                Py_UCS4 c;
                while ((c = at(t, e)) != q && c != '<' && c != '>' && c != 0xFFFFFFFF)
                    e++;
                if (c == q)
                    r = e + 1;
            } else if (unquoted_char(q)) {
                Py_ssize_t e = v;
                while (unquoted_char(at(t, e)))
                    e++;
                r = e;
            }
        }
        p = r;
    }
    while (space_or_slash(at(t, p)))
        p++;
    return at(t, p) == '>';
}

/* The str argument of function `name` read as a Text; 0 and a TypeError when not a str. */
static int text_of(PyObject *arg, const char *name, Text *t) {
    if (!PyUnicode_Check(arg)) {
        PyErr_Format(PyExc_TypeError, "%s() takes a str, not %.100s", name, Py_TYPE(arg)->tp_name);
        return 0;
    }
    t->kind = PyUnicode_KIND(arg);
    t->data = PyUnicode_DATA(arg);
    t->n = PyUnicode_GET_LENGTH(arg);
    return 1;
}

static PyObject *tokens(PyObject *module, PyObject *arg) {
    (void)module;
    Text t;
    if (!text_of(arg, "tokens", &t))
        return NULL;
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    PyObject *bang = PyUnicode_FromString("!");
    PyObject *unread = PyUnicode_FromString("");
    if (bang == NULL || unread == NULL)
        goto fail;
    Py_ssize_t i = 0;
    while (i < t.n) {
        Py_ssize_t lt = PyUnicode_FindChar(arg, '<', i, t.n, 1);
        if (lt == -2)
            goto fail;
        if (lt < 0)
            break;
        Py_ssize_t s = lt + 1;
        PyObject *token = NULL;
        if (clean_comment(&t, s)) {
            token = bang;
            Py_INCREF(token);
            i = s + 1;
        } else {
            Py_ssize_t p = s + (at(&t, s) == '/');
            if (ascii_letter(at(&t, p))) {
                p++;
                while (name_char(at(&t, p)))
                    p++;
                if (tag_ends(&t, p)) {
                    token = PyUnicode_Substring(arg, s, p);
                    if (token == NULL)
                        goto fail;
                    i = p;
                }
            }
            if (token == NULL) {
                Py_UCS4 c = at(&t, s);
                if (ascii_letter(c) || c == '!' || c == '/' || c == '?') {
                    token = unread;
                    Py_INCREF(token);
                }
                i = s;
            }
        }
        if (token != NULL) {
            int failed = PyList_Append(out, token);
            Py_DECREF(token);
            if (failed)
                goto fail;
        }
    }
    Py_DECREF(bang);
    Py_DECREF(unread);
    return out;
fail:
    Py_XDECREF(bang);
    Py_XDECREF(unread);
    Py_DECREF(out);
    return NULL;
}

static inline Py_UCS4 lower(Py_UCS4 c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

/* Whether "<svg" or "<math" (ASCII letters in any case) is anywhere in the markup:
 * _FOREIGN.search(markup) is not None. */
static PyObject *foreign(PyObject *module, PyObject *arg) {
    (void)module;
    Text t;
    if (!text_of(arg, "foreign", &t))
        return NULL;
    Py_ssize_t i = 0;
    for (;;) {
        Py_ssize_t lt = PyUnicode_FindChar(arg, '<', i, t.n, 1);
        if (lt == -2)
            return NULL;
        if (lt < 0)
            Py_RETURN_FALSE;
        Py_UCS4 a = lower(at(&t, lt + 1)), b = lower(at(&t, lt + 2)), c = lower(at(&t, lt + 3));
        if ((a == 's' && b == 'v' && c == 'g') ||
            (a == 'm' && b == 'a' && c == 't' && lower(at(&t, lt + 4)) == 'h'))
            Py_RETURN_TRUE;
        i = lt + 1;
    }
}

static PyMethodDef methods[] = {
    {"tokens", tokens, METH_O,
     "tokens(markup) -> list[str]: _SKELETON.findall(markup) of crawler.urls.pagebounds."},
    {"foreign", foreign, METH_O,
     "foreign(markup) -> bool: _FOREIGN.search(markup) is not None (crawler.urls.pagebounds)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_skeleton",
    "The page's tags as a skeleton, in C (crawler.urls.pagebounds._SKELETON.findall).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__skeleton(void) { return PyModule_Create(&module); }
