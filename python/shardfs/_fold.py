"""A tar fold's samples as a sequence (shardfs.View.fold)."""
import json

from . import _shardfs


class Sample(dict):
    """One sample: its members' bytes by extension ({"jpg": b"...",
    "cls": b"3"}), with `.index` (its line in samples.jsonl) and `.key`."""
    __slots__ = ("index", "key")

    def __init__(self, index, key, members):
        super().__init__(members)
        self.index, self.key = index, key

    def __repr__(self):
        return f"<shardfs.Sample {self.index} {self.key!r} {sorted(self)}>"

    def __reduce__(self):
        return Sample, (self.index, self.key, dict(self))


class Fold:
    """The samples of a fold view, in the order of its
    `.shardfs/samples.jsonl` (WebDataset's grouping: members sharing the
    path up to the first '.' of the file name):

        len(fold); fold[i]; fold[-1]; fold.by_key("img002"); fold.index("img002")

    fold[i] is a Sample: the members' bytes by extension. Opening costs one
    pass over samples.jsonl for where each line starts (8 bytes a sample);
    fold[i] then parses its line alone. `buffers=True` gives read-only
    memoryviews over the stored bytes instead of copies (View.buffer)."""

    def __init__(self, view, path="", buffers=False):
        self.view, self.path, self.buffers = view, path.strip("/"), buffers
        index = self._p(".shardfs/samples.jsonl")
        data = view.buffer(index)
        self._set_starts(_shardfs.line_starts(data))
        if len(data) and data[-1] != 0x0A:
            raise OSError(f"{view.path}: {index}: the last line has no newline")
        self._data = data
        self._keys = None

    def _set_starts(self, raw):
        # native int64s read in place (no numpy needed, none imported)
        self._raw_starts = raw
        self._starts = memoryview(raw).cast("q")

    def _p(self, rel):
        return f"{self.path}/{rel}" if self.path else rel

    def __getstate__(self):
        # the line index travels (no second pass); the bytes are read again
        return {"view": self.view, "path": self.path, "buffers": self.buffers,
                "starts": self._raw_starts}

    def __setstate__(self, s):
        self.view, self.path, self.buffers = s["view"], s["path"], s["buffers"]
        self._set_starts(s["starts"])
        self._data = self.view.buffer(self._p(".shardfs/samples.jsonl"))
        self._keys = None

    def __len__(self):
        # a last line without a newline was refused at open
        return len(self._starts) - 1

    def line(self, i):
        """Line i of samples.jsonl, parsed: {"i", "key", "members"}."""
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"sample {i} of {n}")
        i %= n
        return json.loads(bytes(self._data[self._starts[i]:self._starts[i + 1]]))

    def __getitem__(self, i):
        s = self.line(i)
        get = self.view.buffer if self.buffers else self.view.read
        return Sample(s["i"], s["key"],
                      {ext: get(self._p(m)) for ext, m in s["members"].items()})

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def index(self, key):
        """The index of the sample with this key (KeyError if none). The
        first call reads every line once."""
        if self._keys is None:
            self._keys = {json.loads(bytes(self._data[a:b]))["key"]: i for i, (a, b)
                          in enumerate(zip(self._starts[:-1], self._starts[1:]))}
        return self._keys[key]

    def by_key(self, key):
        """The Sample with this key."""
        return self[self.index(key)]

    def __repr__(self):
        return f"<shardfs.Fold {self.view.path!r} {len(self)} samples>"
