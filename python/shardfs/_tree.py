"""A directory shown the way a mount of it shows it (shardfs.open(DIR))."""
import os

from . import Entry, View, _Queries, _shardfs


def _views(dirpath, names):
    """{view name: container name} of one directory, named as the mount
    names them: without the format's ending, or "<file name>.d" when that
    is taken; a Shardlake alias (aliases/NAME.json) shows as the link NAME.
    Which files get a view is the library's answer (shardfs_view_ext): by
    the format's ending, and for a tar, unless a fold beside it takes it
    as a shard."""
    taken = set(names)
    out = {}
    names = sorted(names)
    exts = _shardfs.view_exts(os.path.normpath(dirpath), names)
    for name, end in zip(names, exts):
        if end is None or not os.path.isfile(os.path.join(dirpath, name)) \
                or os.path.islink(os.path.join(dirpath, name)):
            continue
        view = name[:-len(end)]
        if view in taken:
            view = name + ".d"
        taken.add(view)
        out[view] = name
    return out


class Tree(_Queries):
    """A directory as a mount of it shows it: every entry unchanged, and
    beside each container its view (a View, opened when first entered).
    Paths are relative to the directory; the methods are View's. Unlike the
    mount, a container that fails to open raises OSError when its view is
    entered (the mount shows an empty view and logs why), and a file is
    taken for a container by its name alone (the mount also checks its first
    and last bytes before placing a view)."""

    def __init__(self, path):
        self.path = os.fspath(path)
        self._open = {}

    def close(self):
        """Closes every view opened through the tree."""
        for v in self._open.values():
            if isinstance(v, View):
                v.close()
        self._open.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"<shardfs.Tree {self.path!r}>"

    def _resolve(self, path):
        """(SRC path, None, "") or (SRC path of the container, View, path
        inside it); the view is None for an alias link."""
        comps = [c for c in os.fsdecode(path).split("/") if c not in ("", ".")]
        at = self.path
        for i, c in enumerate(comps):
            nxt = os.path.join(at, c)
            if os.path.lexists(nxt):
                at = nxt
                continue
            if os.path.isdir(at):
                cont = _views(at, os.listdir(at)).get(c)
                if cont is not None:
                    src = os.path.join(at, cont)
                    if src not in self._open:
                        self._open[src] = View(src)
                    return src, self._open[src], "/".join(comps[i + 1:])
            raise FileNotFoundError(2, f"{self.path}: no such entry", "/".join(comps))
        return at, None, ""

    def stat(self, path=""):
        src, view, rest = self._resolve(path)
        if view is None:
            st = os.lstat(src)
            name = os.path.basename(src) if path else ""
            if os.path.isdir(src) and not os.path.islink(src):
                return Entry(name, "dir", 0, None)
            if os.path.islink(src):
                return Entry(name, "link", 0, os.readlink(src))
            return Entry(name, "file", st.st_size, None)
        e = view.stat(rest)
        if not rest:
            # the view's top: a directory named after the container, or an
            # alias's link
            return Entry(os.path.basename(os.fsdecode(path).rstrip("/")), e.kind, e.size,
                         e.target)
        return e

    def scandir(self, path=""):
        src, view, rest = self._resolve(path)
        if view is not None:
            return view.scandir(rest)
        names = sorted(os.listdir(src))
        out = [self.stat(f"{path}/{n}" if path else n) for n in names]
        return out + [self.stat(f"{path}/{v}" if path else v) for v in _views(src, names)]

    def listdir(self, path=""):
        return [e.name for e in self.scandir(path)]

    def _in_view(self, path, what):
        src, view, rest = self._resolve(path)
        if view is None:
            if what == "read":
                return None, src
            raise OSError(f"{self.path}: {path}: not inside a view")
        return view, rest

    def read(self, path, size=-1, offset=0):
        view, rest = self._in_view(path, "read")
        if view is None:
            with open(rest, "rb") as f:
                f.seek(offset)
                return f.read(size)
        return view.read(rest, size, offset)

    def walk(self, top=""):
        ents = self.scandir(top)
        dirs = [e.name for e in ents if e.kind == "dir"]
        yield top, dirs, [e.name for e in ents if e.kind != "dir"]
        for d in dirs:
            yield from self.walk(f"{top}/{d}" if top else d)

    def readinto(self, path, buffer, offset=0):
        view, rest = self._in_view(path, "readinto")
        return view.readinto(rest, buffer, offset)

    def buffer(self, path, offset=0, size=-1):
        view, rest = self._in_view(path, "buffer")
        return view.buffer(rest, offset, size)

    def array(self, path):
        view, rest = self._in_view(path, "array")
        return view.array(rest)

    def open(self, path):
        view, rest = self._in_view(path, "read")
        return open(rest, "rb") if view is None else view.open(rest)
