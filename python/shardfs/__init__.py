r"""The views of shardfs without a mount.

`shardfs.open(PATH)` opens a container (a .tsumugi, .tatami, .taridx with
its tars, .sidx or .tet file) into the tree of parts a shardfs mount shows in
its view directory, with the same names, sizes and bytes; `shardfs.open(DIR)`
opens a directory the way the mount shows it, every entry unchanged and the
view of each container beside it. No FUSE, no root: the module reads the
files itself through libshardfs-format.

    >>> import shardfs
    >>> with shardfs.open("demo.taridx") as v:
    ...     v.listdir()[:3]
    ...     v.read("000003.txt")
    ...     fold = v.fold()              # the samples, in samples.jsonl order
    ...     dict(fold[3]), fold[3].key
    ['000000.txt', '000000.cls', '000001.txt']
    b'caption of sample 3\n'
    ({'txt': b'caption of sample 3\n', 'cls': b'0'}, '000003')

(demo.taridx: what `tests/writers/taridx_writer.py --sample DIR` writes.)

Paths inside a view are relative ("columns/price/values.npy"); the hidden
".shardfs/" is reachable by name (info(), verify()). Failures raise OSError
(FileNotFoundError, IsADirectoryError...) whose message names the file and
the part. The GIL is released while the library lists, reads and decodes.
docs/python.md has the whole story, and when to mount instead.
"""
import io
import json
import os
from collections import namedtuple

from . import _shardfs
from ._fold import Fold, Sample

__all__ = ["open", "View", "Tree", "Entry", "Fold", "Sample", "FoldDataset", "set_cache_size",
           "cache_stats"]

_KINDS = {1: "dir", 2: "file", 3: "link"}


def set_cache_size(nbytes):
    """Sets the budget of the process's decode cache (256 MiB at first, the
    mount's --cache-size default): decoded parts and the working memory
    views size by their files (a tar's index) are held within it."""
    _shardfs.set_cache_size(nbytes)


def cache_stats():
    """What the process's cache holds: {"budget", "bytes_held" (decoded
    parts), "bytes_charged" (working memory), "sheds" (times an idle View
    gave back what it held)}."""
    return _shardfs.cache_stats()


class Entry(namedtuple("Entry", "name kind size target")):
    """One entry of a tree: its name, kind ("dir", "file" or "link"), size
    (files; 0 otherwise) and target (links; None otherwise)."""
    __slots__ = ()

    def is_dir(self):
        return self.kind == "dir"

    def is_file(self):
        return self.kind == "file"

    def is_symlink(self):
        return self.kind == "link"


def _entry(t):
    name, kind, size, target, error = t
    if error:
        # the file's size could not be learnt: reading it fails the same way
        raise OSError(-error, os.strerror(-error), name)
    return Entry(name, _KINDS[kind], size, target)


def _reopen(cls, path, closed):
    v = cls(path)
    if closed:
        v.close()
    return v


def _rel(path):
    """A path inside a view as the library takes it: relative, no '.'."""
    path = os.fsdecode(path)
    return "/".join(c for c in path.split("/") if c not in ("", "."))


class _Queries:
    """os.path's questions (View and Tree), from one stat each."""

    def _kind(self, path):
        # as os.path: a path whose stat fails (missing, or a file whose
        # size cannot be learnt) is none of them
        try:
            return self.stat(path).kind
        except OSError:
            return None

    def exists(self, path):
        """Whether `path` names an entry (as os.path.lexists: a link
        counts)."""
        return self._kind(path) is not None

    def isdir(self, path):
        """Whether `path` is a directory (a link is not)."""
        return self._kind(path) == "dir"

    def isfile(self, path):
        """Whether `path` is a file (a link is not)."""
        return self._kind(path) == "file"


class View(_Queries, _shardfs.Handle):
    """A container opened into its view: the tree the mount shows in the
    container's view directory. Use it in a `with` block, or close() it.

    read(), readinto() and buffer() are the extension's own methods: one C
    call each, the GIL released while the library looks up and copies.
    A view may be used by several threads at once. In a process started by
    fork (DataLoader workers) it opens the container again on first use, so
    that nothing is shared with the parent but the file names."""

    # -- pickling: by file name (spawned DataLoader workers open their own)
    def __reduce__(self):
        return _reopen, (type(self), self.path, self.closed)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        state = "closed" if self.closed else self.format
        return f"<shardfs.View {self.path!r} ({state})>"

    # -- the tree
    def stat(self, path=""):
        """The Entry at `path` ("" is the top of the view)."""
        return _entry(_shardfs.Handle.stat(self, _rel(path)))

    def scandir(self, path=""):
        """The entries of directory `path`, in the mount's listing order."""
        return [_entry(t) for t in _shardfs.Handle.listdir(self, _rel(path))]

    def listdir(self, path=""):
        """The names in directory `path`, in the mount's listing order."""
        return [t[0] for t in _shardfs.Handle.listdir(self, _rel(path))]

    def walk(self, top=""):
        """Like os.walk, top-down: (dirpath, dirnames, filenames) with
        dirpath relative to the view ("" its top). Links count as files."""
        ents = self.scandir(top)
        dirs = [e.name for e in ents if e.kind == "dir"]
        yield _rel(top), dirs, [e.name for e in ents if e.kind != "dir"]
        for d in dirs:
            yield from self.walk(f"{_rel(top)}/{d}" if _rel(top) else d)

    # -- bytes: read(), readinto() and buffer() are _shardfs.Handle's
    def open(self, path):
        """A read-only binary file object over file `path` (seekable;
        numpy.load, PIL.Image.open, tarfile... take it)."""
        return io.BufferedReader(_RawFile(self, _rel(path)))

    def array(self, path):
        """A .npy part as a numpy array: read-only, over buffer(path)
        (no copy)."""
        import numpy as np
        from numpy.lib import format as npf
        with self.open(path) as f:
            version = npf.read_magic(f)
            shape, fortran, dtype = (npf.read_array_header_1_0(f) if version == (1, 0)
                                     else npf.read_array_header_2_0(f))
            start = f.tell()
        if dtype.hasobject:
            raise ValueError(f"{self.path}: {path}: an object array cannot be shared")
        count = 1
        for d in shape:
            count *= d
        data = np.frombuffer(self.buffer(path, start, count * dtype.itemsize),
                             dtype=dtype, count=count)
        return data.reshape(shape, order="F" if fortran else "C")

    def info(self):
        """.shardfs/info.json as a dict."""
        return json.loads(self.read(".shardfs/info.json"))

    def verify(self):
        """.shardfs/verify: the container checked through, as text (reading
        it checks every part)."""
        return self.read(".shardfs/verify").decode()

    def fold(self, path="", buffers=False):
        """The samples of a tar fold (a .taridx view) as a sequence, in the
        order of `.shardfs/samples.jsonl`: see Fold."""
        return Fold(self, path, buffers)


class _RawFile(io.RawIOBase):
    """File `path` of a view as a raw file object."""

    def __init__(self, view, path):
        super().__init__()
        self._view, self._path = view, path
        self._size = view.stat(path).size
        self._pos = 0
        self.name = f"{view.path}:{path}"

    def readable(self):
        return True

    def seekable(self):
        return True

    def readinto(self, b):
        n = self._view.readinto(self._path, b, self._pos)
        self._pos += n
        return n

    def seek(self, offset, whence=io.SEEK_SET):
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        if base + offset < 0:
            raise ValueError("negative seek position")
        self._pos = base + offset
        return self._pos

    def tell(self):
        return self._pos


def open(path):
    """Opens `path`: a container file into its View, or a directory into a
    Tree showing it as a mount of it would (views beside containers)."""
    if os.path.isdir(path):
        from ._tree import Tree
        return Tree(path)
    return View(path)


def __getattr__(name):
    # torch is imported only when the Dataset is asked for
    if name == "FoldDataset":
        from ._torch import FoldDataset
        return FoldDataset
    if name == "Tree":
        from ._tree import Tree
        return Tree
    raise AttributeError(f"module 'shardfs' has no attribute {name!r}")
