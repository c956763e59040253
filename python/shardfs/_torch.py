"""shardfs.FoldDataset: a fold as a map-style torch Dataset (importing this
imports torch; `import shardfs` alone does not)."""
from torch.utils.data import Dataset

from . import View


class FoldDataset(Dataset):
    """A tar fold (a .taridx file with its tars) as a map-style Dataset:

        ds = shardfs.FoldDataset("train.taridx", transform=decode)
        DataLoader(ds, num_workers=4, shuffle=True)

    ds[i] is transform(fold[i]), fold[i] being the shardfs.Sample of line i
    of samples.jsonl (members' bytes by extension); without a transform, the
    Sample itself. Works with workers started by fork (each reopens the
    container on first use) and by spawn (the Dataset pickles as the file's
    path and its line index; nothing is read twice to start a worker)."""

    def __init__(self, path, transform=None, buffers=False):
        self.fold = View(path).fold(buffers=buffers)
        self.transform = transform

    def __len__(self):
        return len(self.fold)

    def __getitem__(self, i):
        s = self.fold[i]
        return self.transform(s) if self.transform else s
