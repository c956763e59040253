"""The Python module opens a compressed tar (docs/tree-layout.md "Compressed
tars") through the same sf_open_path as the tools: members read as the mount
shows them and as tarfile extracts them."""
import io
import tarfile

import shardfs


def test_a_compressed_tar_reads_as_the_mount_and_tarfile(tmp_path, mount):
    src = tmp_path / "src"
    src.mkdir()
    members = {"d/a.txt": b"alpha\n" * 100, "b.bin": bytes(range(256)) * 40000, "e.txt": b""}
    with tarfile.open(src / "t.tar.gz", "w:gz") as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    mnt = mount(src)
    with tarfile.open(src / "t.tar.gz") as tf, shardfs.open(src / "t.tar.gz") as v:
        for name in members:
            want = tf.extractfile(name).read()
            assert (mnt / "t" / name).read_bytes() == want, name
            assert v.read(name) == want, name
            n = len(want)
            assert v.read(name, 1000, n // 2) == want[n // 2:n // 2 + 1000], name
