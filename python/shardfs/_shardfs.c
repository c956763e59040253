/* shardfs._shardfs: the C API of libshardfs-format (shardfs.h) for Python,
 * one call for each; the package (__init__.py) builds the Python API on it.
 * The GIL is released around every call into the library: listing, reading
 * and decoding run while other threads run Python. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

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

/* ---- Handle: one opened container ---- */

typedef struct {
	PyObject_HEAD
	struct shardfs *h;
	/* Calls running without the GIL: close() waits for none of them, the
	 * last one out closes the handle (both counted under the GIL). */
	int busy;
	int closing;
} Handle;

static PyTypeObject HandleType;

/* Marks a call as running; NULL with ValueError when the handle is closed. */
static struct shardfs *enter(Handle *self)
{
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

/* enter() for a call taking a path (converted by PyUnicode_FSConverter):
 * on failure the path is released. */
static struct shardfs *enter_path(Handle *self, PyObject *pathobj)
{
	struct shardfs *h = enter(self);
	if (!h)
		Py_DECREF(pathobj);
	return h;
}

/* One call's arguments: (path[, size[, offset]]), size -1 and offset 0
 * when left out. */
struct call {
	struct shardfs *h;
	PyObject *pathobj;
	const char *path;
	Py_ssize_t size;
	unsigned long long off;
};

/* Parses the arguments and enters the call: 0, or -1 with the error set. */
static int begin(Handle *self, PyObject *args, struct call *c)
{
	c->size = -1;
	c->off = 0;
	if (!PyArg_ParseTuple(args, "O&|nK", PyUnicode_FSConverter, &c->pathobj, &c->size,
			      &c->off))
		return -1;
	c->path = PyBytes_AS_STRING(c->pathobj);
	c->h = enter_path(self, c->pathobj);
	return c->h ? 0 : -1;
}

/* Ends a call that enter_path began, returning r. */
static PyObject *done(Handle *self, PyObject *pathobj, PyObject *r)
{
	leave(self);
	Py_DECREF(pathobj);
	return r;
}

static int Handle_init(Handle *self, PyObject *args, PyObject *kw)
{
	static char *names[] = { "path", NULL };
	PyObject *pathobj;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "O&", names, PyUnicode_FSConverter, &pathobj))
		return -1;
	if (self->h) {
		PyErr_SetString(PyExc_ValueError, "the handle is open already");
		Py_DECREF(pathobj);
		return -1;
	}
	const char *path = PyBytes_AS_STRING(pathobj);
	struct shardfs *h = NULL;
	int rc;
	Py_BEGIN_ALLOW_THREADS
	rc = shardfs_open(path, &h);
	Py_END_ALLOW_THREADS
	if (rc < 0) {
		api_error(rc, path);
		Py_DECREF(pathobj);
		return -1;
	}
	Py_DECREF(pathobj);
	self->h = h;
	return 0;
}

static PyObject *Handle_close(Handle *self, PyObject *unused)
{
	if (self->h && !self->closing) {
		self->closing = 1;
		self->busy++;
		leave(self);
	}
	Py_RETURN_NONE;
}

static void Handle_dealloc(Handle *self)
{
	/* no call can be running: each holds a reference */
	if (self->h)
		shardfs_close(self->h);
	Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Handle_closed(Handle *self, void *unused)
{
	return PyBool_FromLong(!self->h || self->closing);
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

static PyObject *Handle_stat(Handle *self, PyObject *args)
{
	struct call c;
	if (begin(self, args, &c))
		return NULL;
	struct shardfs_entry e;
	int rc;
	Py_BEGIN_ALLOW_THREADS
	rc = shardfs_stat(c.h, c.path, &e);
	Py_END_ALLOW_THREADS
	return done(self, c.pathobj, rc < 0 ? api_error(rc, c.path) : entry_tuple(&e));
}

/* The entries of a listing, gathered without the GIL (their strings are
 * the handle's, valid while the call keeps it open). */
struct entries {
	struct shardfs_entry *v;
	size_t n, cap;
};

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
	l->v[l->n++] = *e;
	return 0;
}

static PyObject *Handle_listdir(Handle *self, PyObject *args)
{
	struct call c;
	if (begin(self, args, &c))
		return NULL;
	struct entries l = { 0 };
	int rc;
	Py_BEGIN_ALLOW_THREADS
	rc = shardfs_list(c.h, c.path, collect, &l);
	Py_END_ALLOW_THREADS
	PyObject *r = NULL;
	if (rc == -ENOMEM && !shardfs_last_error()[0])
		PyErr_NoMemory();
	else if (rc < 0)
		api_error(rc, c.path);
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
	free(l.v);
	return done(self, c.pathobj, r);
}

/* A whole file up to this size is read in one call (one lookup) into a
 * scratch buffer, then copied: cheaper than learning its size first. */
#define READ_AT_ONCE (64 * 1024)

static PyObject *Handle_read(Handle *self, PyObject *args)
{
	struct call c;
	if (begin(self, args, &c))
		return NULL;
	PyObject *r = NULL;
	ssize_t n = 0;
	if (c.size < 0) {
		/* to the end: small files in one call */
		char *scratch = malloc(READ_AT_ONCE);
		if (!scratch) {
			PyErr_NoMemory();
			goto out;
		}
		struct shardfs_entry e = { 0 };
		int more = 0;
		Py_BEGIN_ALLOW_THREADS
		n = shardfs_read(c.h, c.path, scratch, READ_AT_ONCE, c.off);
		if (n == READ_AT_ONCE) {
			/* a larger file: its size, then one read into the result */
			int rc = shardfs_stat(c.h, c.path, &e);
			more = 1;
			if (rc < 0)
				n = rc;
		}
		Py_END_ALLOW_THREADS
		if (n < 0)
			api_error((int)n, c.path);
		else if (!more)
			r = PyBytes_FromStringAndSize(scratch, n);
		free(scratch);
		if (n < 0 || !more)
			goto out;
		c.size = e.size > c.off ? (Py_ssize_t)(e.size - c.off) : 0;
	}
	r = PyBytes_FromStringAndSize(NULL, c.size);
	if (r) {
		char *buf = PyBytes_AS_STRING(r);
		Py_BEGIN_ALLOW_THREADS
		n = shardfs_read(c.h, c.path, buf, (size_t)c.size, c.off);
		Py_END_ALLOW_THREADS
		if (n < 0) {
			Py_CLEAR(r);
			api_error((int)n, c.path);
		} else if (n < c.size) {
			_PyBytes_Resize(&r, n);
		}
	}
out:
	return done(self, c.pathobj, r);
}

static PyObject *Handle_readinto(Handle *self, PyObject *args)
{
	PyObject *pathobj;
	Py_buffer b;
	unsigned long long off;
	if (!PyArg_ParseTuple(args, "O&w*K", PyUnicode_FSConverter, &pathobj, &b, &off))
		return NULL;
	struct shardfs *h = enter_path(self, pathobj);
	if (!h) {
		PyBuffer_Release(&b);
		return NULL;
	}
	const char *path = PyBytes_AS_STRING(pathobj);
	ssize_t n;
	Py_BEGIN_ALLOW_THREADS
	n = shardfs_read(h, path, b.buf, (size_t)b.len, off);
	Py_END_ALLOW_THREADS
	PyBuffer_Release(&b);
	return done(self, pathobj, n < 0 ? api_error((int)n, path) : PyLong_FromSsize_t(n));
}

/* ---- Held: bytes where they lie, as a read-only buffer ---- */

typedef struct {
	PyObject_HEAD
	struct shardfs_hold *hold;
	const void *data;
	Py_ssize_t len;
} Held;

static PyTypeObject HeldType;

static PyObject *Handle_hold(Handle *self, PyObject *args)
{
	struct call c;
	if (begin(self, args, &c))
		return NULL;
	Held *r = PyObject_New(Held, &HeldType);
	if (r) {
		ssize_t n;
		r->hold = NULL;
		Py_BEGIN_ALLOW_THREADS
		n = shardfs_hold(c.h, c.path, c.off, c.size < 0 ? SIZE_MAX : (size_t)c.size, &r->data,
				 &r->hold);
		Py_END_ALLOW_THREADS
		if (n < 0) {
			Py_CLEAR(r);
			api_error((int)n, c.path);
		} else {
			r->len = n;
		}
	}
	return done(self, c.pathobj, (PyObject *)r);
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

static PyMethodDef Handle_methods[] = {
	{ "close", (PyCFunction)Handle_close, METH_NOARGS,
	  "close(): lets go of the container (after calls still running)." },
	{ "stat", (PyCFunction)Handle_stat, METH_VARARGS,
	  "stat(path) -> (name, kind, size, target, error)" },
	{ "listdir", (PyCFunction)Handle_listdir, METH_VARARGS,
	  "listdir(dir) -> [(name, kind, size, target, error), ...] in listing order" },
	{ "read", (PyCFunction)Handle_read, METH_VARARGS,
	  "read(path, size=-1, offset=0) -> bytes (shorter at the end; size -1: to the end)" },
	{ "readinto", (PyCFunction)Handle_readinto, METH_VARARGS,
	  "readinto(path, buffer, offset) -> number of bytes read into the writable buffer" },
	{ "hold", (PyCFunction)Handle_hold, METH_VARARGS,
	  "hold(path, size=-1, offset=0) -> Held, the bytes where they lie (size -1: to the end)" },
	{ NULL },
};

static PyGetSetDef Handle_getset[] = {
	{ "format", (getter)Handle_format, NULL, "the format module that opened the file", NULL },
	{ "closed", (getter)Handle_closed, NULL, "True once close() was called", NULL },
	{ NULL },
};

static PyTypeObject HandleType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "shardfs._shardfs.Handle",
	.tp_doc = "Handle(path): a container opened with libshardfs-format (shardfs_open).",
	.tp_basicsize = sizeof(Handle),
	.tp_dealloc = (destructor)Handle_dealloc,
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_methods = Handle_methods,
	.tp_getset = Handle_getset,
	.tp_init = (initproc)Handle_init,
	.tp_new = PyType_GenericNew,
};

static struct PyModuleDef module = {
	PyModuleDef_HEAD_INIT,
	.m_name = "shardfs._shardfs",
	.m_doc = "The C API of libshardfs-format, one call for each (see the shardfs package).",
	.m_size = -1,
};

PyMODINIT_FUNC PyInit__shardfs(void);
PyMODINIT_FUNC PyInit__shardfs(void)
{
	if (PyType_Ready(&HandleType) < 0 || PyType_Ready(&HeldType) < 0)
		return NULL;
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
