/* shardfs._shardfs: the C API of libshardfs-format (shardfs.h) for Python,
 * one call for each; the package (__init__.py) builds the Python API on it.
 * The GIL is released around every call into the library: listing, reading
 * and decoding run while other threads run Python. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <shardfs.h>

/* OSError (its errno's subclass: FileNotFoundError...) with the library's
 * message, which names the file and the part, and the path asked for. */
static PyObject *api_error(int rc, const char *path)
{
	const char *msg = shardfs_last_error();
	PyObject *exc = PyObject_CallFunction(PyExc_OSError, "iss", -rc,
					      msg[0] ? msg : strerror(-rc), path);
	if (exc) {
		PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
		Py_DECREF(exc);
	}
	return NULL;
}

/* ---- arguments ---- */

/* Fills slots[0..n) from the positional arguments and the keywords named
 * names[0..n) of a METH_FASTCALL | METH_KEYWORDS call, NULL where not
 * given; the first `required` must be. 0, or -1 with TypeError set. */
static int args_get(const char *fn, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
		    const char *const *names, int n, int required, PyObject **slots)
{
	if (nargs > n) {
		PyErr_Format(PyExc_TypeError, "%s() takes at most %d arguments (%zd given)", fn, n,
			     nargs);
		return -1;
	}
	for (int i = 0; i < n; i++)
		slots[i] = i < nargs ? args[i] : NULL;
	Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
	for (Py_ssize_t k = 0; k < nkw; k++) {
		PyObject *key = PyTuple_GET_ITEM(kwnames, k);
		int j = 0;
		while (j < n && PyUnicode_CompareWithASCIIString(key, names[j]) != 0)
			j++;
		if (j == n || slots[j]) {
			PyErr_Format(PyExc_TypeError, j == n ? "%s() got an unexpected keyword argument %R"
					 : "%s() got multiple values for argument %R", fn, key);
			return -1;
		}
		slots[j] = args[nargs + k];
	}
	for (int i = 0; i < required; i++)
		if (!slots[i]) {
			PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s'", fn,
				     names[i]);
			return -1;
		}
	return 0;
}

/* A path argument as the library takes it: the bytes of an ASCII str or of
 * a bytes object as they are (no copy: most calls), anything else
 * (non-ASCII str, os.PathLike) through os.fsencode into `owned`. */
struct cpath {
	const char *s;
	PyObject *owned;
};

static int path_get(PyObject *o, struct cpath *p)
{
	Py_ssize_t n = -1;
	p->owned = NULL;
	if (PyUnicode_Check(o) && PyUnicode_IS_ASCII(o))
		p->s = PyUnicode_AsUTF8AndSize(o, &n);
	else if (PyBytes_Check(o))
		p->s = PyBytes_AsString(o), n = PyBytes_GET_SIZE(o);
	if (n < 0) {
		if (!PyUnicode_FSConverter(o, &p->owned))
			return -1;
		p->s = PyBytes_AS_STRING(p->owned);
		n = PyBytes_GET_SIZE(p->owned);
	}
	if (strlen(p->s) != (size_t)n) {
		Py_CLEAR(p->owned);
		PyErr_SetString(PyExc_ValueError, "embedded null byte");
		return -1;
	}
	return 0;
}

/* An optional integer argument (None or absent: `dflt`). */
static int ssize_get(PyObject *o, Py_ssize_t dflt, Py_ssize_t *out)
{
	*out = dflt;
	if (!o || o == Py_None)
		return 0;
	*out = PyLong_AsSsize_t(o);
	return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

static int offset_get(PyObject *o, unsigned long long *out)
{
	*out = 0;
	if (!o)
		return 0;
	*out = PyLong_AsUnsignedLongLong(o);
	return *out == (unsigned long long)-1 && PyErr_Occurred() ? -1 : 0;
}

/* ---- Handle: one opened container ---- */

/* Forks so far: a handle opened before the last one belongs to the parent
 * (pthread_atfork counts them in the child). */
static unsigned long forks;

static void count_fork(void)
{
	forks++;
}

typedef struct {
	PyObject_HEAD
	struct shardfs *h;
	PyObject *path;   /* as given (os.fspath): str or bytes */
	PyObject *fspath; /* its bytes, to open it again in a forked child */
	unsigned long born; /* `forks` when opened */
	/* Calls running without the GIL: close() waits for none of them, the
	 * last one out closes the handle (both counted under the GIL). */
	int busy;
	int closing;
} Handle;

static PyTypeObject HandleType;

/* Opens self->fspath into self->h: 0, or -1 with OSError set. */
static int handle_open(Handle *self)
{
	const char *path = PyBytes_AS_STRING(self->fspath);
	struct shardfs *h = NULL;
	int rc;
	Py_BEGIN_ALLOW_THREADS
	rc = shardfs_open(path, &h);
	Py_END_ALLOW_THREADS
	if (rc < 0) {
		api_error(rc, path);
		return -1;
	}
	self->h = h;
	self->born = forks;
	return 0;
}

/* A handle a forked child got from its parent: the parent's is left
 * alone, never closed or used here (another thread of the parent may have
 * held one of its locks at the fork); the child opens its own when
 * `reopen` and the parent's was open. */
static int handle_forked(Handle *self, int reopen)
{
	int open = self->h && !self->closing;
	self->h = NULL;
	self->busy = self->closing = 0;
	self->born = forks;
	return open && reopen ? handle_open(self) : 0;
}

/* Marks a call as running; NULL with ValueError when the handle is closed. */
static struct shardfs *enter(Handle *self)
{
	if (self->born != forks && handle_forked(self, 1))
		return NULL;
	if (!self->h || self->closing) {
		PyErr_SetString(PyExc_ValueError, "I/O operation on a closed shardfs view");
		return NULL;
	}
	self->busy++;
	return self->h;
}

static void leave(Handle *self)
{
	if (--self->busy == 0 && self->closing && self->h) {
		struct shardfs *h = self->h;
		self->h = NULL;
		Py_BEGIN_ALLOW_THREADS
		shardfs_close(h);
		Py_END_ALLOW_THREADS
	}
}

/* One call's path and handle: begin() parses the path and enters, end()
 * leaves and lets go of the path, returning r. */
struct call {
	struct shardfs *h;
	struct cpath p;
};

static int begin(Handle *self, PyObject *pathobj, struct call *c)
{
	if (path_get(pathobj, &c->p))
		return -1;
	if (!(c->h = enter(self))) {
		Py_CLEAR(c->p.owned);
		return -1;
	}
	return 0;
}

static PyObject *end(Handle *self, struct call *c, PyObject *r)
{
	leave(self);
	Py_CLEAR(c->p.owned);
	return r;
}

static int Handle_init(Handle *self, PyObject *args, PyObject *kw)
{
	static char *names[] = { "path", NULL };
	PyObject *arg;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "O", names, &arg))
		return -1;
	if (self->h) {
		PyErr_SetString(PyExc_ValueError, "the handle is open already");
		return -1;
	}
	PyObject *path = PyOS_FSPath(arg), *fspath = NULL;
	if (!path || !PyUnicode_FSConverter(path, &fspath)) {
		Py_XDECREF(path);
		return -1;
	}
	Py_XSETREF(self->path, path);
	Py_XSETREF(self->fspath, fspath);
	return handle_open(self);
}

static PyObject *Handle_close(Handle *self, PyObject *unused)
{
	if (self->born != forks)
		handle_forked(self, 0);
	if (self->h && !self->closing) {
		self->closing = 1;
		self->busy++;
		leave(self);
	}
	Py_RETURN_NONE;
}

static void Handle_dealloc(Handle *self)
{
	/* no call can be running: each holds a reference; a forked child's
	 * copy of its parent's handle is left alone (handle_forked) */
	if (self->h && self->born == forks)
		shardfs_close(self->h);
	Py_XDECREF(self->path);
	Py_XDECREF(self->fspath);
	Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Handle_closed(Handle *self, void *unused)
{
	return PyBool_FromLong(!self->h || self->closing);
}

static PyObject *Handle_path(Handle *self, void *unused)
{
	return Py_NewRef(self->path ? self->path : Py_None);
}

static PyObject *Handle_format(Handle *self, void *unused)
{
	struct shardfs *h = enter(self);
	if (!h)
		return NULL;
	PyObject *r = PyUnicode_FromString(shardfs_format(h));
	leave(self);
	return r;
}

/* An entry as (name, kind, size, target, error): kind 1 directory, 2 file,
 * 3 link; error the negative errno learning a file's size failed with. */
static PyObject *entry_tuple(const struct shardfs_entry *e)
{
	PyObject *name = PyUnicode_DecodeFSDefault(e->name);
	PyObject *target = e->target ? PyUnicode_DecodeFSDefault(e->target) : Py_NewRef(Py_None);
	PyObject *r = NULL;
	if (name && target)
		r = Py_BuildValue("(OiKOi)", name, (int)e->kind, (unsigned long long)e->size,
				  target, e->error);
	Py_XDECREF(name);
	Py_XDECREF(target);
	return r;
}

static const char *const path_only[] = { "path" };

static PyObject *Handle_stat(Handle *self, PyObject *const *args, Py_ssize_t nargs,
			     PyObject *kwnames)
{
	PyObject *a[1];
	struct call c;
	if (args_get("stat", args, nargs, kwnames, path_only, 1, 1, a) || begin(self, a[0], &c))
		return NULL;
	struct shardfs_entry e;
	int rc;
	Py_BEGIN_ALLOW_THREADS
	rc = shardfs_stat(c.h, c.p.s, &e);
	Py_END_ALLOW_THREADS
	return end(self, &c, rc < 0 ? api_error(rc, c.p.s) : entry_tuple(&e));
}

/* The entries of a listing, gathered without the GIL, their strings
 * copied (shardfs_list's last only while its callback runs). */
struct entries {
	struct shardfs_entry *v;
	size_t n, cap;
};

static void entries_free(struct entries *l)
{
	for (size_t i = 0; i < l->n; i++) {
		free((char *)l->v[i].name);
		free((char *)l->v[i].target);
	}
	free(l->v);
}

static int collect(const struct shardfs_entry *e, void *arg)
{
	struct entries *l = arg;
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 64;
		struct shardfs_entry *v = realloc(l->v, cap * sizeof *v);
		if (!v)
			return -ENOMEM;
		l->v = v;
		l->cap = cap;
	}
	struct shardfs_entry c = *e;
	c.name = strdup(e->name);
	c.target = e->target ? strdup(e->target) : NULL;
	if (!c.name || (e->target && !c.target)) {
		free((char *)c.name);
		free((char *)c.target);
		return -ENOMEM;
	}
	l->v[l->n++] = c;
	return 0;
}

static PyObject *Handle_listdir(Handle *self, PyObject *const *args, Py_ssize_t nargs,
				PyObject *kwnames)
{
	PyObject *a[1];
	struct call c;
	if (args_get("listdir", args, nargs, kwnames, path_only, 1, 1, a) ||
	    begin(self, a[0], &c))
		return NULL;
	struct entries l = { 0 };
	int rc;
	Py_BEGIN_ALLOW_THREADS
	rc = shardfs_list(c.h, c.p.s, collect, &l);
	Py_END_ALLOW_THREADS
	PyObject *r = NULL;
	if (rc == -ENOMEM && !shardfs_last_error()[0])
		PyErr_NoMemory();
	else if (rc < 0)
		api_error(rc, c.p.s);
	else if ((r = PyList_New((Py_ssize_t)l.n))) {
		for (size_t i = 0; i < l.n; i++) {
			PyObject *t = entry_tuple(&l.v[i]);
			if (!t) {
				Py_CLEAR(r);
				break;
			}
			PyList_SET_ITEM(r, (Py_ssize_t)i, t);
		}
	}
	entries_free(&l);
	return end(self, &c, r);
}

/* The whole file from `off` in one lookup: its bytes held where they lie,
 * then copied into a bytes object of their size. */
static PyObject *read_to_end(struct call *c, unsigned long long off)
{
	const void *data;
	struct shardfs_hold *hd = NULL;
	ssize_t n;
	Py_BEGIN_ALLOW_THREADS
	n = shardfs_hold(c->h, c->p.s, off, SIZE_MAX, &data, &hd);
	Py_END_ALLOW_THREADS
	if (n < 0)
		return api_error((int)n, c->p.s);
	PyObject *r = PyBytes_FromStringAndSize(NULL, n);
	if (r) {
		char *buf = PyBytes_AS_STRING(r);
		int rc;
		/* without the GIL: a mapped page may have to come from disk */
		Py_BEGIN_ALLOW_THREADS
		rc = shardfs_hold_copy(hd, buf);
		Py_END_ALLOW_THREADS
		if (rc < 0) {
			Py_CLEAR(r);
			api_error(rc, c->p.s);
		}
	}
	shardfs_release(hd);
	return r;
}

static const char *const read_args[] = { "path", "size", "offset" };

static PyObject *Handle_read(Handle *self, PyObject *const *args, Py_ssize_t nargs,
			     PyObject *kwnames)
{
	PyObject *a[3];
	Py_ssize_t size;
	unsigned long long off;
	struct call c;
	if (args_get("read", args, nargs, kwnames, read_args, 3, 1, a) ||
	    ssize_get(a[1], -1, &size) || offset_get(a[2], &off) || begin(self, a[0], &c))
		return NULL;
	if (size < 0)
		return end(self, &c, read_to_end(&c, off));
	PyObject *r = PyBytes_FromStringAndSize(NULL, size);
	if (r) {
		char *buf = PyBytes_AS_STRING(r);
		ssize_t n;
		Py_BEGIN_ALLOW_THREADS
		n = shardfs_read(c.h, c.p.s, buf, (size_t)size, off);
		Py_END_ALLOW_THREADS
		if (n < 0) {
			Py_CLEAR(r);
			api_error((int)n, c.p.s);
		} else if (n < size) {
			_PyBytes_Resize(&r, n);
		}
	}
	return end(self, &c, r);
}

static const char *const readinto_args[] = { "path", "buffer", "offset" };

static PyObject *Handle_readinto(Handle *self, PyObject *const *args, Py_ssize_t nargs,
				 PyObject *kwnames)
{
	PyObject *a[3];
	unsigned long long off;
	Py_buffer b;
	struct call c;
	if (args_get("readinto", args, nargs, kwnames, readinto_args, 3, 2, a) ||
	    offset_get(a[2], &off) || PyObject_GetBuffer(a[1], &b, PyBUF_WRITABLE))
		return NULL;
	if (begin(self, a[0], &c)) {
		PyBuffer_Release(&b);
		return NULL;
	}
	ssize_t n;
	Py_BEGIN_ALLOW_THREADS
	n = shardfs_read(c.h, c.p.s, b.buf, (size_t)b.len, off);
	Py_END_ALLOW_THREADS
	PyBuffer_Release(&b);
	return end(self, &c, n < 0 ? api_error((int)n, c.p.s) : PyLong_FromSsize_t(n));
}

/* ---- Held: bytes where they lie, as a read-only buffer ---- */

typedef struct {
	PyObject_HEAD
	struct shardfs_hold *hold;
	const void *data;
	Py_ssize_t len;
} Held;

static PyTypeObject HeldType;

static const char *const buffer_args[] = { "path", "offset", "size" };

static PyObject *Handle_buffer(Handle *self, PyObject *const *args, Py_ssize_t nargs,
			       PyObject *kwnames)
{
	PyObject *a[3];
	Py_ssize_t size;
	unsigned long long off;
	struct call c;
	if (args_get("buffer", args, nargs, kwnames, buffer_args, 3, 1, a) ||
	    offset_get(a[1], &off) || ssize_get(a[2], -1, &size) || begin(self, a[0], &c))
		return NULL;
	Held *held = PyObject_New(Held, &HeldType);
	PyObject *r = NULL;
	if (held) {
		ssize_t n;
		held->hold = NULL;
		Py_BEGIN_ALLOW_THREADS
		n = shardfs_hold(c.h, c.p.s, off, size < 0 ? SIZE_MAX : (size_t)size, &held->data,
				 &held->hold);
		Py_END_ALLOW_THREADS
		held->len = n < 0 ? 0 : n;
		if (n < 0)
			api_error((int)n, c.p.s);
		else
			r = PyMemoryView_FromObject((PyObject *)held);
		Py_DECREF(held);
	}
	return end(self, &c, r);
}

static void Held_dealloc(Held *self)
{
	shardfs_release(self->hold);
	PyObject_Free(self);
}

static int Held_getbuffer(Held *self, Py_buffer *view, int flags)
{
	return PyBuffer_FillInfo(view, (PyObject *)self, (void *)self->data, self->len, 1, flags);
}

static PyObject *Held_mapped(Held *self, void *unused)
{
	return PyBool_FromLong(shardfs_hold_mapped(self->hold));
}

static Py_ssize_t Held_length(Held *self)
{
	return self->len;
}

static PyBufferProcs Held_as_buffer = {
	.bf_getbuffer = (getbufferproc)Held_getbuffer,
};

static PySequenceMethods Held_as_sequence = {
	.sq_length = (lenfunc)Held_length,
};

static PyGetSetDef Held_getset[] = {
	{ "mapped", (getter)Held_mapped, NULL,
	  "True when the bytes are the source file's mapped pages (touching them after the "
	  "file shrank raises SIGBUS, as with numpy.memmap).", NULL },
	{ NULL },
};

static PyTypeObject HeldType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "shardfs._shardfs.Held",
	.tp_doc = "A file's bytes where they lie (read-only buffer); they stay valid while this "
		  "object lives, also after the view is closed.",
	.tp_basicsize = sizeof(Held),
	.tp_dealloc = (destructor)Held_dealloc,
	.tp_as_buffer = &Held_as_buffer,
	.tp_as_sequence = &Held_as_sequence,
	.tp_getset = Held_getset,
	.tp_flags = Py_TPFLAGS_DEFAULT,
};

#define FAST METH_FASTCALL | METH_KEYWORDS

static PyMethodDef Handle_methods[] = {
	{ "close", (PyCFunction)Handle_close, METH_NOARGS,
	  "close(): lets go of the container. Calls still running finish first; buffers "
	  "handed out stay valid." },
	{ "stat", (PyCFunction)(void (*)(void))Handle_stat, FAST,
	  "stat(path) -> (name, kind, size, target, error)" },
	{ "listdir", (PyCFunction)(void (*)(void))Handle_listdir, FAST,
	  "listdir(path) -> [(name, kind, size, target, error), ...] in listing order" },
	{ "read", (PyCFunction)(void (*)(void))Handle_read, FAST,
	  "read(path, size=-1, offset=0) -> bytes\n\nUp to `size` bytes (all if negative) of "
	  "file `path` from `offset`, copied into a new bytes object (one lookup, one copy)." },
	{ "readinto", (PyCFunction)(void (*)(void))Handle_readinto, FAST,
	  "readinto(path, buffer, offset=0) -> int\n\nCopies bytes of file `path` from `offset` "
	  "into the writable `buffer` (bytearray, numpy array...); returns how many." },
	{ "buffer", (PyCFunction)(void (*)(void))Handle_buffer, FAST,
	  "buffer(path, offset=0, size=-1) -> memoryview\n\nThe bytes of file `path` as a "
	  "read-only memoryview, without a copy where they are stored as-is: it looks into the "
	  "container's mapping (stored members, raw tiles), or into the decoded part "
	  "(memoryview.obj.mapped says which). It keeps what it looks at alive, also past "
	  "close(). As with numpy.memmap, should the source file shrink while the memoryview "
	  "lives, touching the lost pages kills the process with SIGBUS; read() copies instead "
	  "and raises OSError then." },
	{ NULL },
};

static PyGetSetDef Handle_getset[] = {
	{ "format", (getter)Handle_format, NULL,
	  "The format module that opened the file: \"tsumugi\", \"tatami\", \"taridx\", "
	  "\"sidx\" (a Shardlake shard), \"alias\" or \"tet\".", NULL },
	{ "closed", (getter)Handle_closed, NULL, "True once close() was called", NULL },
	{ "path", (getter)Handle_path, NULL, "the path the container was opened with", NULL },
	{ NULL },
};

static PyTypeObject HandleType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "shardfs._shardfs.Handle",
	.tp_doc = "Handle(path): a container opened with libshardfs-format (shardfs_open).",
	.tp_basicsize = sizeof(Handle),
	.tp_dealloc = (destructor)Handle_dealloc,
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
	.tp_methods = Handle_methods,
	.tp_getset = Handle_getset,
	.tp_init = (initproc)Handle_init,
	.tp_new = PyType_GenericNew,
};

/* ---- line_starts: where each line of a text starts (Fold) ---- */

/* Advises huge pages for the 2 MiB stretches inside [p, p+len): a fresh
 * 4 KiB page costs 8-15 µs to touch here (docs/performance.md, lever 15),
 * and a million lines' starts are 8 MB. Advice: refused, it changes
 * nothing. */
static void advise_huge(void *p, size_t len)
{
	const uintptr_t huge = (uintptr_t)2 << 20;
	uintptr_t from = ((uintptr_t)p + huge - 1) & ~(huge - 1);
	uintptr_t to = ((uintptr_t)p + len) & ~(huge - 1);
	if (to > from)
		madvise((void *)from, to - from, MADV_HUGEPAGE);
}

static PyObject *line_starts(PyObject *mod, PyObject *arg)
{
	Py_buffer b;
	if (PyObject_GetBuffer(arg, &b, PyBUF_SIMPLE))
		return NULL;
	const char *p = b.buf, *end = p + b.len;
	Py_ssize_t lines = 0;
	Py_BEGIN_ALLOW_THREADS
	for (const char *q = p; q < end && (q = memchr(q, '\n', (size_t)(end - q))); q++)
		lines++;
	Py_END_ALLOW_THREADS
	PyObject *r = PyBytes_FromStringAndSize(NULL, (lines + 1) * (Py_ssize_t)sizeof(int64_t));
	if (r) {
		int64_t *at = (int64_t *)PyBytes_AS_STRING(r);
		Py_BEGIN_ALLOW_THREADS
		advise_huge(at, (size_t)(lines + 1) * sizeof *at);
		*at++ = 0;
		for (const char *q = p; q < end && (q = memchr(q, '\n', (size_t)(end - q))); q++)
			*at++ = q + 1 - p;
		Py_END_ALLOW_THREADS
	}
	PyBuffer_Release(&b);
	return r;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static PyObject *set_cache_size(PyObject *mod, PyObject *arg)
{
	(void)mod;
	unsigned long long bytes = PyLong_AsUnsignedLongLong(arg);
	if (bytes == (unsigned long long)-1 && PyErr_Occurred())
		return NULL;
	int rc = shardfs_set_cache_size(bytes);
	if (rc) {
		errno = -rc;
		return PyErr_SetFromErrno(rc == -EINVAL ? PyExc_ValueError : PyExc_OSError);
	}
	Py_RETURN_NONE;
}

static PyObject *cache_stats(PyObject *mod, PyObject *unused)
{
	(void)mod, (void)unused;
	struct shardfs_cache_stats s;
	shardfs_cache_stats(&s);
	return Py_BuildValue("{sKsKsKsK}", "budget", (unsigned long long)s.budget, "bytes_held",
			     (unsigned long long)s.bytes_held, "bytes_charged",
			     (unsigned long long)s.bytes_charged, "sheds",
			     (unsigned long long)s.sheds);
}

/* view_exts(dir, names): shardfs_view_ext of each name, the names sorted
 * once for all. */
static PyObject *view_exts(PyObject *mod, PyObject *args)
{
	PyObject *dir = NULL, *seq, *list = NULL, *out = NULL;
	(void)mod;
	if (!PyArg_ParseTuple(args, "O&O", PyUnicode_FSConverter, &dir, &seq))
		return NULL;
	list = PySequence_List(seq);
	Py_ssize_t n = list ? PyList_GET_SIZE(list) : 0;
	const char **sorted = list ? PyMem_Calloc((size_t)n + 1, sizeof *sorted) : NULL;
	if (!sorted)
		goto done;
	/* each name as bytes, in place of the str given */
	for (Py_ssize_t i = 0; i < n; i++) {
		PyObject *b = NULL;
		if (!PyUnicode_FSConverter(PyList_GET_ITEM(list, i), &b))
			goto done;
		PyList_SetItem(list, i, b);
		sorted[i] = PyBytes_AS_STRING(b);
	}
	qsort(sorted, (size_t)n, sizeof *sorted, by_name);
	if (!(out = PyList_New(n)))
		goto done;
	for (Py_ssize_t i = 0; i < n; i++) {
		const char *ext = shardfs_view_ext(PyBytes_AS_STRING(dir),
						   PyBytes_AS_STRING(PyList_GET_ITEM(list, i)),
						   sorted, (size_t)n);
		PyObject *x = ext ? PyUnicode_DecodeFSDefault(ext) : Py_NewRef(Py_None);
		if (!x) {
			Py_CLEAR(out);
			goto done;
		}
		PyList_SET_ITEM(out, i, x);
	}
done:
	PyMem_Free(sorted);
	Py_XDECREF(list);
	Py_XDECREF(dir);
	return out;
}

static PyMethodDef module_methods[] = {
	{ "view_exts", view_exts, METH_VARARGS,
	  "view_exts(dir, names) -> list: for each of the names of directory dir's entries, the "
	  "ending of the format whose view the mount places beside it, or None (shardfs_view_ext)." },
	{ "set_cache_size", set_cache_size, METH_O,
	  "set_cache_size(bytes): the budget of the process's decode cache (shardfs_set_cache_size)." },
	{ "cache_stats", cache_stats, METH_NOARGS,
	  "cache_stats() -> {budget, bytes_held, bytes_charged, sheds} (shardfs_cache_stats)." },
	{ "line_starts", line_starts, METH_O,
	  "line_starts(text) -> bytes: 0 and the offset after each newline of the buffer, as "
	  "native int64 (numpy.frombuffer(..., numpy.int64)); lines[i] is text[s[i]:s[i+1]]." },
	{ NULL },
};

static struct PyModuleDef module = {
	PyModuleDef_HEAD_INIT,
	.m_name = "shardfs._shardfs",
	.m_doc = "The C API of libshardfs-format, one call for each (see the shardfs package).",
	.m_size = -1,
	.m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__shardfs(void);
PyMODINIT_FUNC PyInit__shardfs(void)
{
	if (PyType_Ready(&HandleType) < 0 || PyType_Ready(&HeldType) < 0)
		return NULL;
	static int registered;
	if (!registered && pthread_atfork(NULL, NULL, count_fork)) {
		PyErr_SetString(PyExc_OSError, "pthread_atfork failed");
		return NULL;
	}
	registered = 1;
	PyObject *m = PyModule_Create(&module);
	if (!m)
		return NULL;
	if (PyModule_AddObjectRef(m, "Handle", (PyObject *)&HandleType) < 0 ||
	    PyModule_AddObjectRef(m, "Held", (PyObject *)&HeldType) < 0) {
		Py_DECREF(m);
		return NULL;
	}
	return m;
}
