#!/usr/bin/python3
"""Test-data writer for tsumugi (TSM1) search shards.

Writes shards the way spec/tsumugi.md describes upstream's writer (header
last, regions back to back from offset 64, footer sections schema/regions/
stats, trailer), covering: varied region subsets, every region codec (none,
zstd, zstd with shared raw dictionaries and 1/2/4-byte Dictionary_IDs), every
forward column codec (none, zstd, per-column dictionary, 16 KiB blocked),
empty regions, unknown kinds, zero documents and large bodies.

Beside each shard it writes <shard>.expect.json: what the view must show,
computed here independently (decoded region bytes as SHA-256 and CRC32C,
each docs/<id>/<col> file's bytes as hex, the dequantized feature matrix).

    tsumugi_writer.py --out DIR      the whole test set
    tsumugi_writer.py --sample DIR   one small representative shard
"""
import argparse
import hashlib
import json
import math
import os
import struct
import sys

import numpy as np
import zstandard

# ---- primitives -----------------------------------------------------------

def _crc_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC = _crc_table()


def crc32c(data: bytes) -> int:
    c = 0xFFFFFFFF
    for b in data:
        c = _CRC[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def with_dict_id(frame: bytes, dict_id: int) -> bytes:
    """Declares dict_id in a frame made against a raw-content dictionary
    (libzstd writes none for those), as upstream's encoder does."""
    fhd = frame[4]
    assert fhd & 3 == 0
    pos = 5 if fhd & 0x20 else 6
    if dict_id < 256:
        code, idb = 1, struct.pack('<B', dict_id)
    elif dict_id < 65536:
        code, idb = 2, struct.pack('<H', dict_id)
    else:
        code, idb = 3, struct.pack('<I', dict_id)
    return frame[:4] + bytes([fhd | code]) + frame[5:pos] + idb + frame[pos:]


def zstd_frame(data: bytes, dictionary: bytes = None, dict_id: int = 0) -> bytes:
    if dictionary:
        d = zstandard.ZstdCompressionDict(dictionary, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
        c = zstandard.ZstdCompressor(level=3, dict_data=d, write_checksum=True)
        return with_dict_id(c.compress(data), dict_id)
    return zstandard.ZstdCompressor(level=3, write_checksum=True).compress(data)


# ---- forward region (FWD1 v2) ---------------------------------------------

BLOCK = 16384


def column_dictionary(values):
    """Upstream's sampling: every step-th non-empty value until 16 KiB."""
    present = [v for v in values if v]
    step = max(1, len(present) // 1024)
    out = b''
    for v in present[::step]:
        out += v
        if len(out) >= BLOCK:
            return out[:BLOCK]
    return out


def encode_value(value: bytes, codec: int, dictionary: bytes, col: int) -> bytes:
    if not value:
        return b''
    if codec == 0:
        return value
    if codec == 1:
        return zstd_frame(value)
    if codec == 2:
        return zstd_frame(value, dictionary, col + 1)
    frames = [zstd_frame(value[i:i + BLOCK], dictionary, col + 1)
              for i in range(0, len(value), BLOCK)]
    ends, pos = [], 0
    for f in frames:
        pos += len(f)
        ends.append(pos)
    return struct.pack('<I', len(frames)) + b''.join(struct.pack('<I', e) for e in ends) + b''.join(frames)


def forward_region(columns, rows):
    """columns: [(name, type, codec, flags, values)] with len(values) == rows."""
    dicts, blocks = [], []
    for i, (name, typ, codec, flags, values) in enumerate(columns):
        d = column_dictionary(values) if codec in (2, 3) else b''
        dicts.append(d)
        stored = [encode_value(v, codec, d, i) for v in values]
        offs, pos = [0], 0
        for s in stored:
            pos += len(s)
            offs.append(pos)
        blocks.append(b''.join(struct.pack('<I', o) for o in offs) + b''.join(stored))
    head_len = 16 + sum(4 + len(c[0]) + 38 for c in columns) + 4
    pos = head_len
    data_offs = []
    for b in blocks:
        data_offs.append(pos)
        pos += len(b)
    dict_offs = []
    for d in dicts:
        dict_offs.append(pos if d else 0)
        pos += len(d)
    head = b'FWD1' + struct.pack('<III', 2, len(columns), rows)
    for i, (name, typ, codec, flags, _) in enumerate(columns):
        head += struct.pack('<I', len(name)) + name + struct.pack(
            '<BBIQQQQ', typ, codec, flags, data_offs[i], len(blocks[i]), dict_offs[i], len(dicts[i]))
    head += struct.pack('<I', crc32c(head))
    assert len(head) == head_len
    return head + b''.join(blocks) + b''.join(dicts)


# ---- feature region (FEA1 v1) ---------------------------------------------

SIGNALS = ["static_rank", "page_rank", "host_rank", "domain_rank", "trust", "spam_mass",
           "in_degree", "linking_domains", "freshness", "change_rate", "content_quality",
           "boilerplate", "near_dup", "doc_len", "title_len", "body_len", "url_field_len",
           "anchor_field_len", "language", "url_depth", "url_len", "https", "host_error_rate",
           "linking_hosts", "reciprocity", "host_link_div", "outbound_spam"]


def f32(x):
    return float(np.float32(x))


def feature_region(cols, levels, schema_version=2):
    """cols: [(id, width, quant, (p0, p1, p2))]; levels: rows x cols ints.
    Returns the region and the dequantized float32 matrix, computed in f64
    as spec B2.2 says."""
    offsets, pos = [], 0
    for _, width, _, _ in cols:
        offsets.append(pos)
        pos += width
    stride = pos
    head = b'FEA1' + struct.pack('<IHHIHH', 1, len(cols), stride, len(levels), schema_version, 0)
    for (cid, width, quant, _), off in zip(cols, offsets):
        head += struct.pack('<BBBBHH', cid, width, quant, 0, off, 0)
    for cid, _, quant, p in cols:
        head += struct.pack('<BBfff', cid, quant, *p)
    head += struct.pack('<I', crc32c(head))
    rows = b''
    out = np.zeros((len(levels), len(cols)), dtype=np.float32)
    for r, row in enumerate(levels):
        for c, ((_, width, quant, p), q) in enumerate(zip(cols, row)):
            rows += struct.pack('<B' if width == 1 else '<H', q)
            p0, p1, p2 = (f32(x) for x in p)
            top = 255 if width == 1 else 65535
            if quant == 1:
                v = math.exp(p0 + q * p1) - p2
            elif quant == 2:
                v = (q - math.floor(top / 2 + 0.5)) * p0
            elif quant == 3:
                v = q
            else:
                v = p0 + q * p1
            out[r, c] = v
    return head + rows, out


# ---- container ------------------------------------------------------------

KINDS = {1: 'lexical', 2: 'forward', 3: 'feature', 4: 'graph', 5: 'vector', 6: 'dictionary'}


def shard(regions, doc_count, node_base=0, epoch=0, extra_flags=0, dictionaries=None,
          schema=b'\x00', stats=None):
    """regions: [dict(kind, raw, codec=0, dict_id=0, flags=0, stored=None)].
    Returns (file bytes, descriptors with the region's raw bytes)."""
    body = b''
    descs = []
    flags = extra_flags
    dict_by_id = dict(dictionaries or {})
    regions = list(regions)
    if dict_by_id:
        tsdc = b'TSDC' + struct.pack('<II', 1, len(dict_by_id))
        for i, d in dict_by_id.items():
            tsdc += struct.pack('<II', i, len(d)) + d
        regions.append(dict(kind=6, raw=tsdc))
    for r in regions:
        codec = r.get('codec', 0)
        raw = r['raw']
        if 'stored' in r:
            stored = r['stored']
        elif codec == 0:
            stored = raw
        elif codec == 1:
            stored = zstd_frame(raw)
        else:
            stored = zstd_frame(raw, dict_by_id[r['dict_id']], r['dict_id']) if raw else \
                zstandard.ZstdCompressor(write_content_size=True).compress(b'')
        d = dict(kind=r['kind'], codec=codec, flags=r.get('flags', 0), offset=64 + len(body),
                 length=len(stored), raw_length=len(raw), crc=crc32c(stored),
                 dict_id=r.get('dict_id', 0), raw=raw, stored=stored)
        descs.append(d)
        body += stored
        if 1 <= r['kind'] <= 6:
            flags |= 1 << (r['kind'] - 1)
    st = dict(stats or {})
    st['doc_count'] = float(doc_count)
    stat_bytes = uvarint(len(st))
    for k in sorted(st, key=lambda k: k.encode()):
        v = st[k]
        bits = v if isinstance(v, int) else struct.unpack('<Q', struct.pack('<d', v))[0]
        stat_bytes += uvarint(len(k.encode())) + k.encode() + struct.pack('<Q', bits)
    table = b''.join(struct.pack('<BBHQQQII', d['kind'], d['codec'], d['flags'], d['offset'],
                                 d['length'], d['raw_length'], d['crc'], d['dict_id']) for d in descs)
    footer = b''
    for tag, payload in ((1, schema), (2, table), (3, stat_bytes)):
        footer += struct.pack('<BI', tag, len(payload)) + payload
    footer_offset = 64 + len(body)
    header = b'TSM1' + struct.pack('<HHQIIQQQQ', 1, 0, flags, doc_count, len(descs),
                                   footer_offset, len(footer), node_base, epoch)
    header += struct.pack('<II', crc32c(header), 0)
    trailer = struct.pack('<QI', len(footer), crc32c(footer)) + b'TSM1'
    return header + body + footer + trailer, descs


def expectation(descs, node_base, forward=None, features=None):
    """What the view must show."""
    seen = {}
    regions = []
    for d in descs:
        base = KINDS.get(d['kind'], 'kind-%d' % d['kind'])
        n = seen.get(base, 0)
        seen[base] = n + 1
        name = base if n == 0 else '%s.%d' % (base, n)
        regions.append(dict(name=name, codec=d['codec'], size=len(d['raw']),
                            stored_size=len(d['stored']),
                            sha256=hashlib.sha256(d['raw']).hexdigest(),
                            crc32c=crc32c(d['raw']),
                            stored_sha256=hashlib.sha256(d['stored']).hexdigest()))
    out = dict(node_base=node_base, regions=regions)
    if forward is not None:
        columns, rows = forward
        files = {}
        for name, typ, codec, flags, values in columns:
            files[name.decode()] = [(v.hex().encode() if name == b'doc_id' else v).hex() for v in values]
        out['docs'] = dict(rows=rows, columns=[c[0].decode() for c in columns],
                           types=[c[1] for c in columns], files=files)
    if features is not None:
        cols, matrix = features
        out['features'] = dict(names=[SIGNALS[c[0]] if c[0] < len(SIGNALS) else 'feature_%d' % c[0]
                                      for c in cols],
                               values=[[float(x) for x in row] for row in matrix])
    return out


# ---- the test set -----------------------------------------------------------

WORDS = ('search shard river graph dense café über москва 東京 index crawl vector bear '
         'forest query rank page host link web the of and to').split()


def text(rng, n_words):
    return ' '.join(WORDS[int(i)] for i in rng.integers(0, len(WORDS), n_words)).encode()


def documents(rng, rows, big_body=0):
    doc_id, url, title, body, anchor, raw = [], [], [], [], [], []
    for d in range(rows):
        u = b'https://example.org/p/%d/%s.html' % (d, WORDS[d % len(WORDS)].encode())
        doc_id.append(hashlib.sha256(u).digest() if d % 5 != 3 else b'')
        url.append(u)
        title.append(text(rng, int(rng.integers(0, 8))))
        n = int(rng.integers(0, 400))
        b = b'# ' + title[-1] + b'\n\n' + text(rng, n) if n else b''
        if big_body and d == 1:
            b = (text(rng, big_body // 6) + b'\n') * 1
        body.append(b)
        anchor.append(text(rng, int(rng.integers(0, 4))) if d % 3 else b'')
        raw.append(bytes(rng.integers(0, 256, d % 4, dtype=np.uint8)))
    return [(b'doc_id', 1, 0, 0, doc_id), (b'url', 1, 1, 0, url), (b'title', 1, 2, 0, title),
            (b'body', 1, 3, 1, body), (b'anchor', 1, 2, 0, anchor), (b'raw', 4, 0, 0, raw)]


def feature_columns():
    return [(0, 1, 0, (-1.5, 0.0125, 0.0)), (1, 1, 1, (0.001, 0.026, 1.0)),
            (6, 2, 1, (0.0155, 0.000104, 1.0)), (18, 1, 3, (0.0, 0.0, 0.0)),
            (24, 1, 2, (0.0078, 0.0, 0.0)), (25, 2, 2, (0.00002, 0.0, 0.0)),
            (5, 2, 0, (0.032, 0.0000035, 0.0)), (40, 1, 7, (0.5, 0.25, 0.0))]


def feature_levels(rng, rows, cols):
    return [[int(rng.integers(0, 256 if w == 1 else 65536)) for (_, w, _, _) in cols]
            for _ in range(rows)]


def write(out_dir, name, data, expect):
    with open(os.path.join(out_dir, name), 'wb') as f:
        f.write(data)
    with open(os.path.join(out_dir, name + '.expect.json'), 'w') as f:
        json.dump(expect, f, indent=1, ensure_ascii=False)


def sample(out_dir):
    """One small production-shaped shard: forward (every column codec),
    feature (zstd), an opaque lexical region (zstd)."""
    rng = np.random.default_rng(7)
    cols = documents(rng, 6)
    fwd = forward_region(cols, 6)
    fcols = feature_columns()[:4]
    fea, mat = feature_region(fcols, feature_levels(rng, 6, fcols))
    lex = b'opaque lexical bytes ' * 20
    data, descs = shard([dict(kind=1, raw=lex, codec=1), dict(kind=3, raw=fea, codec=1),
                         dict(kind=2, raw=fwd)], 6, node_base=1000, epoch=1767225600,
                        stats={'avg_doc_len': 674.5, 'analyzer_hash': 0xad27f881a1942003})
    write(out_dir, 'sample.tsumugi', data, expectation(descs, 1000, (cols, 6), (fcols, mat)))


def test_set(out_dir):
    rng = np.random.default_rng(20240601)
    # every column codec in an uncompressed forward region, zstd features,
    # an unknown kind, an empty zstd graph region (the 9-byte empty frame)
    cols = documents(rng, 24)
    fcols = feature_columns()
    fea, mat = feature_region(fcols, feature_levels(rng, 24, fcols), schema_version=7)
    data, descs = shard([dict(kind=2, raw=forward_region(cols, 24)),
                         dict(kind=3, raw=fea, codec=1),
                         dict(kind=42, raw=b'unknown kind payload'),
                         dict(kind=4, raw=b'', codec=1, stored=zstd_frame(b''))],
                        24, node_base=5_000_000, epoch=99,
                        stats={'build_config_hash': 0x7ff8000000000001, 'avg_doc_len': 1e6})
    write(out_dir, 'all_codecs.tsumugi', data, expectation(descs, 5_000_000, (cols, 24), (fcols, mat)))

    # shared dictionaries with 1-, 2- and 4-byte ids; zstd+dict forward and
    # feature; a second forward region (listed as forward.1, never read);
    # zero-length regions of unknown kinds under codecs 1 and 2
    cols2 = documents(rng, 10)
    fcols2 = feature_columns()[:3]
    fea2, mat2 = feature_region(fcols2, feature_levels(rng, 10, fcols2))
    dicts = {5: b'the of and to search shard ' * 40, 1000: b'https://example.org/p/ ' * 50,
             100000: b'FEA1 FWD1 LEX1 ' * 30}
    data, descs = shard([dict(kind=2, raw=forward_region(cols2, 10), codec=2, dict_id=1000),
                         dict(kind=3, raw=fea2, codec=2, dict_id=5),
                         dict(kind=1, raw=b'lexical ' * 300, codec=2, dict_id=100000),
                         dict(kind=2, raw=forward_region(cols2[:2], 10), codec=1),
                         dict(kind=9, raw=b'', codec=1, flags=0x8001),
                         dict(kind=10, raw=b'', codec=2, dict_id=5)],
                        10, dictionaries=dicts)
    write(out_dir, 'dict_regions.tsumugi', data, expectation(descs, 0, (cols2, 10), (fcols2, mat2)))

    # zero documents: empty forward and feature regions, an empty lexical one
    cols0 = documents(rng, 0)
    fea0, mat0 = feature_region(feature_columns(), [])
    data, descs = shard([dict(kind=1, raw=b''), dict(kind=2, raw=forward_region(cols0, 0), codec=1),
                         dict(kind=3, raw=fea0)], 0)
    write(out_dir, 'zero_docs.tsumugi', data, expectation(descs, 0, (cols0, 0), (feature_columns(), mat0)))

    # a 1 MiB body: 64 blocks
    colsb = documents(rng, 3, big_body=1 << 20)
    data, descs = shard([dict(kind=2, raw=forward_region(colsb, 3))], 3, node_base=7)
    write(out_dir, 'big_body.tsumugi', data, expectation(descs, 7, (colsb, 3)))

    # only features, and only opaque regions
    fea3, mat3 = feature_region(fcols, feature_levels(rng, 5, fcols))
    data, descs = shard([dict(kind=3, raw=fea3)], 5, node_base=3)
    write(out_dir, 'features_only.tsumugi', data, expectation(descs, 3, None, (fcols, mat3)))
    data, descs = shard([dict(kind=4, raw=b'GRAPH' * 50, codec=1), dict(kind=5, raw=bytes(range(256)))],
                        0)
    write(out_dir, 'opaque_only.tsumugi', data, expectation(descs, 0))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument('--out', help='write the whole test set into this directory')
    g.add_argument('--sample', help='write one small representative shard into this directory')
    a = ap.parse_args(argv)
    d = a.out or a.sample
    os.makedirs(d, exist_ok=True)
    (test_set if a.out else sample)(d)
    return 0


if __name__ == '__main__':
    sys.exit(main())
