/* The depth proof of crawler/urls/pagebounds.py in C. Its regular expressions and
 * _proof_by_expressions are the specification; tests/test_pagebounds_skeleton.py compares
 * them with these on generated and real markup:
 *   tokens(markup)   its _SKELETON.findall(markup), token for token;
 *   foreign(markup)  its _FOREIGN.search(markup) is not None;
 *   proof(markup, max_depth, max_formatting)  its _proof_by_expressions (section below).
 * The first pass reads each "<" as the pattern does, in one pass without backtracking (every
 * quantifier of the pattern is possessive or decided by one character).
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

/* A token of the pass: kind NAME is markup[start:end] (the name, its "/" included). */
enum { NAME, BANG, UNREAD };

typedef struct {
    Py_ssize_t start, end;
    int kind;
} Token;

/* The next token at or after *i; 1 and *i moved past what it consumed, 0 at the end. */
static int next_token(PyObject *arg, const Text *t, Py_ssize_t *i, Token *out) {
    while (*i < t->n) {
        Py_ssize_t lt = PyUnicode_FindChar(arg, '<', *i, t->n, 1);
        if (lt == -2)
            return -1;
        if (lt < 0)
            break;
        Py_ssize_t s = lt + 1;
        if (clean_comment(t, s)) {
            out->kind = BANG;
            out->start = out->end = s;
            *i = s + 1;
            return 1;
        }
        Py_ssize_t p = s + (at(t, s) == '/');
        if (ascii_letter(at(t, p))) {
            p++;
            while (name_char(at(t, p)))
                p++;
            if (tag_ends(t, p)) {
                out->kind = NAME;
                out->start = s;
                out->end = p;
                *i = p;
                return 1;
            }
        }
        *i = s;
        Py_UCS4 c = at(t, s);
        if (ascii_letter(c) || c == '!' || c == '/' || c == '?') {
            out->kind = UNREAD;
            out->start = out->end = s;
            return 1;
        }
    }
    *i = t->n;
    return 0;
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
    Token tok;
    int found;
    while ((found = next_token(arg, &t, &i, &tok)) == 1) {
        PyObject *token;
        if (tok.kind == NAME) {
            token = PyUnicode_Substring(arg, tok.start, tok.end);
            if (token == NULL)
                goto fail;
        } else {
            token = tok.kind == BANG ? bang : unread;
            Py_INCREF(token);
        }
        int failed = PyList_Append(out, token);
        Py_DECREF(token);
        if (failed)
            goto fail;
    }
    if (found < 0)
        goto fail;
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

/* --- The proof: _proof_by_expressions of crawler/urls/pagebounds.py, its specification ------
 *
 * The skeleton is built as the expressions build it (" t1 t2 ... tn ", lower case, "!" tokens,
 * void names and "plaintext" as they strike them) in a char buffer: its tokens are ASCII (tag
 * names) or empty. Each pass of _PAIR.subn is then the same search, left to right, match after
 * match, with the pattern's possessive loops and unanchored back references read the way sre
 * reads them (pair_at). tests/test_pagebounds_skeleton.py compares the two on generated
 * skeletons, hostile and real pages, at many bounds. */

/* Kept equal to pagebounds._VOID, _BREAKOUT_VOID, _FORMATTING, _IMPLIED, _LEVELS (tested). */
typedef struct {
    const char *name;
    Py_ssize_t length;
} Name;
#define N(s) {s, sizeof(s) - 1}
static const Name VOID_NAMES[] = {
    N("area"), N("base"), N("basefont"), N("bgsound"), N("br"), N("col"), N("embed"),
    N("frame"), N("hr"), N("image"), N("img"), N("input"), N("keygen"), N("link"), N("meta"),
    N("param"), N("source"), N("track"), N("wbr"), {NULL, 0}};
static const Name BREAKOUT_VOID_NAMES[] = {
    N("br"), N("embed"), N("hr"), N("img"), N("meta"), {NULL, 0}};
static const Name FORMATTING_NAMES[] = {
    N("a"), N("b"), N("big"), N("code"), N("em"), N("font"), N("i"), N("nobr"), N("s"),
    N("small"), N("strike"), N("strong"), N("tt"), N("u"), {NULL, 0}};
static const Name TABLE_NAMES[] = {N("table"), {NULL, 0}};
#undef N
#define IMPLIED 3
#define LEVELS 3

static int named(const char *s, Py_ssize_t n, const Name *names) {
    for (; names->name; names++)
        if (names->length == n && names->name[0] == s[0] && memcmp(names->name, s, (size_t)n) == 0)
            return 1;
    return 0;
}

/* " /" and the token s[a:b] at p (an unanchored back reference): where it ends, or -1. */
static Py_ssize_t end_tag_at(const char *s, Py_ssize_t n, Py_ssize_t p, Py_ssize_t a,
                             Py_ssize_t b) {
    Py_ssize_t len = b - a;
    if (p + 2 + len > n || s[p] != ' ' || s[p + 1] != '/' ||
        memcmp(s + p + 2, s + a, (size_t)len) != 0)
        return -1;
    return p + 2 + len;
}

/* " ([^ /][^ ]*+)" at p: where the token ends (it starts at p + 1), or -1. */
static Py_ssize_t start_at(const char *s, Py_ssize_t n, Py_ssize_t p) {
    if (p + 1 >= n || s[p] != ' ' || s[p + 1] == ' ' || s[p + 1] == '/')
        return -1;
    const char *space = memchr(s + p + 2, ' ', (size_t)(n - p - 2));
    return space != NULL ? space - s : n;
}

/* _PAIR at i:  A (?: B (?: C /C )*+ /B )*+ /A (?= )  (spaces between): its end, or -1. A failed
 * iteration of a possessive loop ends the loop with the iterations before it. */
static Py_ssize_t pair_at(const char *s, Py_ssize_t n, Py_ssize_t i) {
    Py_ssize_t a_end = start_at(s, n, i);
    if (a_end < 0)
        return -1;
    Py_ssize_t p = a_end;
    for (;;) {
        Py_ssize_t b_end = start_at(s, n, p);
        if (b_end < 0)
            break;
        Py_ssize_t q = b_end;
        for (;;) {
            Py_ssize_t c_end = start_at(s, n, q);
            if (c_end < 0)
                break;
            Py_ssize_t r = end_tag_at(s, n, c_end, q + 1, c_end);
            if (r < 0)
                break;
            q = r;
        }
        Py_ssize_t e = end_tag_at(s, n, q, p + 1, b_end);
        if (e < 0)
            break;
        p = e;
    }
    Py_ssize_t e = end_tag_at(s, n, p, i + 1, a_end);
    return e >= 0 && e < n && s[e] == ' ' ? e : -1;
}

/* One _PAIR.subn("", s) into out (as long as s at most): the pairs struck; *m: out's length. */
static Py_ssize_t strike(const char *s, Py_ssize_t n, char *out, Py_ssize_t *m) {
    Py_ssize_t w = 0, last = 0, struck = 0, i = 0;
    while (i < n) {
        const char *space = memchr(s + i, ' ', (size_t)(n - i));
        if (space == NULL)
            break;
        i = space - s;
        Py_ssize_t e = pair_at(s, n, i);
        if (e < 0) {
            i++;
            continue;
        }
        memcpy(out + w, s + last, (size_t)(i - last));
        w += i - last;
        last = i = e;
        struck++;
    }
    memcpy(out + w, s + last, (size_t)(n - last));
    *m = w + n - last;
    return struck;
}

/* skeleton.count(" ") - 1 - skeleton.count(" /") */
static Py_ssize_t starts_of(const char *s, Py_ssize_t n) {
    Py_ssize_t spaces = 0, ends = 0;
    for (Py_ssize_t k = 0; k < n; k++)
        if (s[k] == ' ') {
            spaces++;
            ends += k + 1 < n && s[k + 1] == '/';
        }
    return spaces - 1 - ends;
}

/* len(findall(" (?:NAMES)?(?= )")): the tokens named one of names, and the empty ones. */
static Py_ssize_t count_named(const char *s, Py_ssize_t n, const Name *names) {
    Py_ssize_t found = 0;
    for (Py_ssize_t k = 0; k + 1 < n; k++) {
        if (s[k] != ' ')
            continue;
        const char *space = memchr(s + k + 1, ' ', (size_t)(n - k - 1));
        if (space == NULL)
            break;
        Py_ssize_t len = space - s - k - 1;
        found += len == 0 || named(s + k + 1, len, names);
        k += len;
    }
    return found;
}

typedef struct {
    Token *tokens;
    Py_ssize_t count, capacity;
    char *skeleton, *spare; /* each as long as the skeleton may grow */
} Proof;

static void proof_free(Proof *pr) {
    PyMem_Free(pr->tokens);
    PyMem_Free(pr->skeleton);
    PyMem_Free(pr->spare);
}

/* The page's tokens into pr->tokens; 0, or -1 with an exception set. */
static int read_tokens(PyObject *arg, const Text *t, Proof *pr) {
    Py_ssize_t i = 0;
    Token tok;
    int found;
    while ((found = next_token(arg, t, &i, &tok)) == 1) {
        if (pr->count == pr->capacity) {
            Py_ssize_t capacity = pr->capacity ? 2 * pr->capacity : 256;
            Token *grown = PyMem_Realloc(pr->tokens, (size_t)capacity * sizeof(Token));
            if (grown == NULL) {
                PyErr_NoMemory();
                return -1;
            }
            pr->tokens = grown;
            pr->capacity = capacity;
        }
        pr->tokens[pr->count++] = tok;
    }
    return found;
}

/* The skeleton as the expressions make it (the block comment above); its length, or -1. */
static Py_ssize_t build_skeleton(const Text *t, Proof *pr, int breakout) {
    size_t size = 3;
    for (Py_ssize_t k = 0; k < pr->count; k++)
        size += (size_t)(pr->tokens[k].end - pr->tokens[k].start) + 1;
    pr->skeleton = PyMem_Malloc(size);
    pr->spare = PyMem_Malloc(size);
    if (pr->skeleton == NULL || pr->spare == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    char *s = pr->skeleton;
    if (pr->count == 0) { /* f" {''} " */
        s[0] = s[1] = ' ';
        return 2;
    }
    const Name *voids = breakout ? BREAKOUT_VOID_NAMES : VOID_NAMES;
    Py_ssize_t w = 0;
    s[w++] = ' ';
    for (Py_ssize_t k = 0; k < pr->count; k++) {
        const Token *tok = &pr->tokens[k];
        if (tok->kind == BANG) /* .replace(" !", "") */
            continue;
        Py_ssize_t first = w;
        for (Py_ssize_t c = tok->start; c < tok->end; c++)
            s[w++] = (char)lower(at(t, c)); /* a name: ASCII */
        Py_ssize_t len = w - first;
        if (len && s[first] != '/' && named(s + first, len, voids)) { /* void.sub("") */
            w = first;
            continue;
        }
        if (len == 9 && memcmp(s + first, "plaintext", 9) == 0) /* plaintext: an empty token */
            w = first;
        s[w++] = ' ';
    }
    return w;
}

/* Whether the skeleton of n chars proves the page shallow: the passes of _proof_by_expressions. */
static int proven(Proof *pr, Py_ssize_t n, Py_ssize_t max_depth, Py_ssize_t max_formatting) {
    Py_ssize_t passes = 0;
    for (;;) {
        Py_ssize_t m;
        Py_ssize_t struck = strike(pr->skeleton, n, pr->spare, &m);
        char *swap = pr->skeleton;
        pr->skeleton = pr->spare;
        pr->spare = swap;
        n = m;
        if (!struck)
            break;
        passes++;
        Py_ssize_t room = max_depth - IMPLIED - 3 * LEVELS * passes;
        if (room < 0)
            return 0;
        Py_ssize_t starts = starts_of(pr->skeleton, n);
        Py_ssize_t levels = room / (3 * LEVELS);
        /* starts - 3 * struck * levels > room, without overflow */
        if (levels == 0 || struck <= (PY_SSIZE_T_MAX / 3 - 1) / levels) {
            if (starts - 3 * struck * levels > room)
                return 0;
        }
    }
    Py_ssize_t depth = IMPLIED + starts_of(pr->skeleton, n) +
                       2 * count_named(pr->skeleton, n, TABLE_NAMES) + 3 * LEVELS * passes;
    if (depth > max_depth)
        return 0;
    return count_named(pr->skeleton, n, FORMATTING_NAMES) <= max_formatting;
}

/* _start_tag_names(markup, tokens, joined) of pagebounds: a frozenset, or None. */
static PyObject *start_tag_names(PyObject *arg, const Text *t, const Proof *pr) {
    for (Py_ssize_t k = 0; k < pr->count; k++)
        if (pr->tokens[k].kind == UNREAD && k > 0)
            Py_RETURN_NONE;
    if (pr->count && pr->tokens[0].kind == UNREAD) { /* the first "<[A-Za-z!/?]" is "<!/?" */
        Py_ssize_t i = 0;
        for (;;) {
            Py_ssize_t lt = PyUnicode_FindChar(arg, '<', i, t->n, 1);
            if (lt == -2)
                return NULL;
            if (lt < 0)
                Py_RETURN_NONE;
            Py_UCS4 c = at(t, lt + 1);
            if (ascii_letter(c))
                Py_RETURN_NONE;
            if (c == '!' || c == '/' || c == '?')
                break;
            i = lt + 1;
        }
    }
    PyObject *names = PySet_New(NULL);
    if (names == NULL)
        return NULL;
    /* Distinct names first in C: an open-addressing table of token indices. */
    size_t slots = 16;
    while (slots < 2 * (size_t)pr->count)
        slots *= 2;
    Py_ssize_t *table = PyMem_Malloc(slots * sizeof(Py_ssize_t));
    if (table == NULL) {
        Py_DECREF(names);
        return PyErr_NoMemory();
    }
    for (size_t k = 0; k < slots; k++)
        table[k] = -1;
    int image = 0;
    for (Py_ssize_t k = 0; k < pr->count; k++) {
        const Token *tok = &pr->tokens[k];
        if (tok->kind != NAME || at(t, tok->start) == '/')
            continue;
        size_t hash = 14695981039346656037ULL;
        for (Py_ssize_t c = tok->start; c < tok->end; c++)
            hash = (hash ^ lower(at(t, c))) * 1099511628211ULL;
        size_t slot = hash & (slots - 1);
        Py_ssize_t len = tok->end - tok->start;
        int seen = 0;
        for (; table[slot] >= 0; slot = (slot + 1) & (slots - 1)) {
            const Token *other = &pr->tokens[table[slot]];
            if (other->end - other->start != len)
                continue;
            Py_ssize_t c = 0;
            while (c < len && lower(at(t, tok->start + c)) == lower(at(t, other->start + c)))
                c++;
            if (c == len) {
                seen = 1;
                break;
            }
        }
        if (seen)
            continue;
        table[slot] = k;
        PyObject *lowered = PyUnicode_New(len, 127);
        if (lowered == NULL)
            goto fail;
        for (Py_ssize_t c = 0; c < len; c++)
            PyUnicode_1BYTE_DATA(lowered)[c] = (Py_UCS1)lower(at(t, tok->start + c));
        image |= len == 5 && memcmp(PyUnicode_1BYTE_DATA(lowered), "image", 5) == 0;
        int failed = PySet_Add(names, lowered);
        Py_DECREF(lowered);
        if (failed)
            goto fail;
    }
    PyMem_Free(table);
    if (image) {
        PyObject *img = PyUnicode_FromString("img");
        if (img == NULL || PySet_Add(names, img) < 0) {
            Py_XDECREF(img);
            Py_DECREF(names);
            return NULL;
        }
        Py_DECREF(img);
    }
    PyObject *frozen = PyFrozenSet_New(names);
    Py_DECREF(names);
    return frozen;
fail:
    PyMem_Free(table);
    Py_DECREF(names);
    return NULL;
}

static PyObject *proof(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    Py_ssize_t max_depth, max_formatting;
    Text t;
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "proof() takes 3 arguments (%zd given)", nargs);
        return NULL;
    }
    if (!text_of(args[0], "proof", &t))
        return NULL;
    max_depth = PyLong_AsSsize_t(args[1]);
    if (max_depth == -1 && PyErr_Occurred())
        return NULL;
    max_formatting = PyLong_AsSsize_t(args[2]);
    if (max_formatting == -1 && PyErr_Occurred())
        return NULL;
    PyObject *breakout = foreign(NULL, args[0]);
    if (breakout == NULL)
        return NULL;
    int is_foreign = breakout == Py_True;
    Py_DECREF(breakout);
    Proof pr = {NULL, 0, 0, NULL, NULL};
    PyObject *out = NULL;
    if (read_tokens(args[0], &t, &pr) < 0)
        goto done;
    Py_ssize_t n = build_skeleton(&t, &pr, is_foreign);
    if (n < 0)
        goto done;
    if (!proven(&pr, n, max_depth, max_formatting)) {
        out = Py_BuildValue("(OO)", Py_False, Py_None);
        goto done;
    }
    PyObject *names = start_tag_names(args[0], &t, &pr);
    if (names != NULL) {
        out = PyTuple_Pack(2, Py_True, names);
        Py_DECREF(names);
    }
done:
    proof_free(&pr);
    return out;
}

static PyMethodDef methods[] = {
    {"tokens", tokens, METH_O,
     "tokens(markup) -> list[str]: _SKELETON.findall(markup) of crawler.urls.pagebounds."},
    {"proof", (PyCFunction)(void (*)(void))proof, METH_FASTCALL,
     "proof(markup, max_depth, max_formatting) -> (bool, frozenset[str] | None): "
     "_proof_by_expressions of crawler.urls.pagebounds."},
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
