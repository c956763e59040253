#!/usr/bin/python3
"""Test-data writer for .tatami files (docs/specs/tatami.md), written from the spec.

Makes files that cover every logical type, every value encoding (PLAIN, RLE,
BITPACK_FOR, DELTA, GROUPVARINT, PFORDELTA, BITMAP), the codecs NONE, ZSTD and
ZSTD_DICT (frames carrying Dictionary_ID 1, as upstream writes them), LZ4 pages
as one raw block (reserved upstream; shardfs reads it as spec §8.4 allows), nulls,
all-null pages, empty payloads, several row groups, blob columns with and
without a shared dictionary, and search segments (block-tree and flat term
dictionaries, a live-docs bitset).

Beside each file, <file>.expect.json holds the values the writer put in
(not anything decoded back), for the tests to compute expected views from.

    tatami_writer.py OUTDIR            the full test set
    tatami_writer.py --sample OUTDIR   one small representative file
"""
import json
import struct
import sys
from pathlib import Path

import zstandard

# ---- primitives (spec §1) ---------------------------------------------

def _crc_byte(c):
    for _ in range(8):
        c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
    return c


# a byte at a time through a table: tests write files of millions of values
_CRC_TABLE = [_crc_byte(i) for i in range(256)]


def crc32c(data):
    crc = 0xFFFFFFFF
    t = _CRC_TABLE
    for b in data:
        crc = t[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def uvarint(v):
    out = bytearray()
    while v >= 0x80:
        out.append(v & 0x7F | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def lenbytes(b):
    return uvarint(len(b)) + b


def pack(values, width):
    n = 0
    for i, v in enumerate(values):
        n |= (v & ((1 << width) - 1)) << (i * width)
    return n.to_bytes((len(values) * width + 7) // 8, 'little')


def min_width(v):
    return max(1, v.bit_length())


M64 = (1 << 64) - 1

# ---- types (spec §7.1) --------------------------------------------------

TYPES = {'bool': 0, 'int8': 1, 'int16': 2, 'int32': 3, 'int64': 4, 'uint8': 5, 'uint16': 6,
         'uint32': 7, 'uint64': 8, 'float32': 9, 'float64': 10, 'string': 11, 'bytes': 12,
         'timestamp_micros': 13, 'list': 14, 'blobref': 15}
WIDTH = {'int8': 1, 'int16': 2, 'int32': 4, 'int64': 8, 'uint8': 1, 'uint16': 2, 'uint32': 4,
         'uint64': 8, 'timestamp_micros': 8, 'float32': 4, 'float64': 8}
SIGNED = {'int8', 'int16', 'int32', 'int64', 'timestamp_micros'}
PLAIN, RLE, BITPACK, DELTA, GVI, PFOR, BITMAP = 0, 1, 3, 4, 5, 6, 8
NONE, LZ4, ZSTD, ZSTD_DICT = 0, 1, 2, 3

# ---- value encodings (spec §10) -----------------------------------------

def enc_bitpack(vals, signed):
    if not vals:
        return b'\x01'
    key = (lambda u: u - (1 << 64) if signed and u >> 63 else u)
    base = min(vals, key=key)
    res = [(v - base) & M64 for v in vals]
    w = min_width(max(res))
    return bytes([w]) + uvarint(base) + pack(res, w)


def enc_delta(vals):
    if not vals:
        return b''
    zz = []
    for a, b in zip(vals, vals[1:]):
        d = (b - a) & M64
        d = d - (1 << 64) if d >> 63 else d
        zz.append(((d << 1) ^ (d >> 63)) & M64)
    return uvarint(vals[0]) + enc_bitpack(zz, False)


def enc_rle(vals):
    w = min_width(max(vals)) if vals else 1
    out = bytearray([w])
    i = 0
    while i < len(vals):
        j = i
        while j < len(vals) and vals[j] == vals[i]:
            j += 1
        if j - i >= 8:
            out += uvarint((j - i) << 1 | 1) + vals[i].to_bytes((w + 7) // 8, 'little')
            i = j
            continue
        k = i
        while k < len(vals) and not (k + 8 <= len(vals) and len(set(vals[k:k + 8])) == 1):
            k += 1
        out += uvarint((k - i) << 1) + pack(vals[i:k], w)
        i = k
    return bytes(out)


def enc_gvi(vals):
    out = bytearray()
    for i in range(0, len(vals), 4):
        grp = vals[i:i + 4]
        lens = [max(1, (v.bit_length() + 7) // 8) for v in grp]
        out.append(sum((n - 1) << (2 * j) for j, n in enumerate(lens)))
        for v, n in zip(grp, lens):
            out += v.to_bytes(n, 'little')
    return bytes(out)


def enc_pfor(vals, width=None):
    """Low `width` bits packed; values that do not fit are exceptions."""
    if width is None:
        width = 3
    exc = [(i, v) for i, v in enumerate(vals) if v >> width]
    out = bytearray([width, len(exc)])
    for i, v in exc:
        out += bytes([i]) + uvarint(v)
    return bytes(out) + pack(vals, width)


def widen(t, v):
    return v & M64 if t in SIGNED else v


def encode_values(t, enc, vals):
    """The dense value body of a page holding the present `vals`."""
    if t == 'bool':
        return pack([1 if v else 0 for v in vals], 1)
    if t in ('float32', 'float64'):
        return b''.join(struct.pack('<f' if t == 'float32' else '<d', v) for v in vals)
    if t in ('string', 'bytes'):
        return b''.join(lenbytes(v.encode() if isinstance(v, str) else v) for v in vals)
    u = [widen(t, v) for v in vals]
    if enc == PLAIN:
        return b''.join((v & ((1 << 8 * WIDTH[t]) - 1)).to_bytes(WIDTH[t], 'little') for v in u)
    return {RLE: enc_rle, BITPACK: lambda x: enc_bitpack(x, t in SIGNED), DELTA: enc_delta,
            GVI: enc_gvi, PFOR: enc_pfor}[enc](u)

# ---- records (spec §6, §8) ------------------------------------------------

def page_payload(codec, raw):
    if codec == NONE:
        return raw
    if codec == LZ4:
        import lz4.block  # only the files that use it need python3-lz4
        return lz4.block.compress(raw, store_size=False)
    return zstd_frame(raw)


def zstd_frame(raw, dict_bytes=None):
    if not raw:
        return b''
    if dict_bytes is None:
        return zstandard.ZstdCompressor(level=3).compress(raw)
    d = zstandard.ZstdCompressionDict(dict_bytes, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
    f = bytearray(zstandard.ZstdCompressor(level=3, dict_data=d).compress(raw))
    # declare Dictionary_ID 1 in the frame header, as upstream's encoder does
    assert f[4] & 3 == 0
    pos = 5 if f[4] & 0x20 else 6
    f[4] |= 1
    return bytes(f[:pos]) + b'\x01' + bytes(f[pos:])


def record(kind, enc, codec, flags, nvals, raw, stored, nulls=0, first_row=0):
    return struct.pack('<BBBBIIIIIII', kind, enc, codec, flags, nvals, len(raw), len(stored),
                       nulls, first_row, crc32c(stored), 0) + stored

# ---- files ------------------------------------------------------------------

class Writer:
    def __init__(self):
        self.body = bytearray(64)
        self.raw_total = 0
        self.stored_total = 0

    def at(self):
        return len(self.body)

    def add(self, rec, raw_len=None, stored_len=None):
        off = self.at()
        self.body += rec
        if raw_len is not None:
            self.raw_total += raw_len
            self.stored_total += stored_len
        return off


def write_file(path, columns, groups, page_rows, blob_cfg=None, search=None, hflags=0, kv=()):
    """columns: list of dict(name, type, flags, values, encs, codecs).
    groups: row counts per group. blob_cfg: name -> dict(dict=bool, codec, run_values)."""
    w = Writer()
    nrows = sum(groups)
    group_entries = []
    start = 0
    for gi, gn in enumerate(groups):
        chunks = []
        gstart = w.at()
        for ci, col in enumerate(columns):
            t = col['type']
            vals = col['values'][start:start + gn]
            first = w.at()
            pages = 0
            raw_sum = stored_sum = 0
            first_enc = None
            last_codec = ZSTD
            for pi, p0 in enumerate(range(0, gn, page_rows)):
                pv = vals[p0:p0 + page_rows]
                present = [v for v in pv if v is not None]
                nulls = len(pv) - len(present)
                bitmap = pack([0 if v is None else 1 for v in pv], 1) if nulls else b''
                if t == 'blobref':
                    enc = PLAIN
                    body = b''
                else:
                    encs = col.get('encs', [PLAIN])
                    enc = encs[(gi * 7 + pi) % len(encs)]
                    body = encode_values(t, enc, present)
                raw = bitmap + body
                codecs = col.get('codecs', [ZSTD])
                codec = codecs[(gi + pi) % len(codecs)]
                stored = page_payload(codec, raw)
                w.add(record(0, enc, codec, 2 if nulls else 0, len(pv), raw, stored, nulls, p0),
                      len(raw), len(stored))
                pages += 1
                raw_sum += len(raw)
                stored_sum += len(stored)
                first_enc = enc if first_enc is None else first_enc
                last_codec = codec
            chunks.append(uvarint(ci) + uvarint(first) + uvarint(stored_sum) + uvarint(raw_sum)
                          + uvarint(gn) + uvarint(sum(v is None for v in vals)) + uvarint(pages)
                          + bytes([first_enc or 0, last_codec, 0]))
        group_entries.append(uvarint(start) + uvarint(gn) + uvarint(w.at() - gstart) + b'\x00'
                             + uvarint(len(chunks)) + b''.join(chunks))
        start += gn
    sections = [(1, uvarint(len(columns)) + b''.join(
        lenbytes(c['name'].encode()) + bytes([TYPES[c['type']], c.get('flags', 0), c.get('element', 0)])
        for c in columns))]
    sections.append((2, uvarint(len(groups)) + b''.join(group_entries)))
    blob_desc, dicts = [], []
    for ci, col in enumerate(columns):
        if col['type'] != 'blobref':
            continue
        cfg = (blob_cfg or {}).get(col['name'], {})
        values = [v for v in col['values'] if v is not None]
        dict_index, dict_bytes = 0, None
        if cfg.get('dict') and values:
            dict_bytes = b''.join(values)[:4096]
            raw = dict_bytes
            stored = zstd_frame(raw)
            off = w.add(record(1, 0, ZSTD, 0, 1, raw, stored), len(raw), len(stored))
            dicts.append((off, len(raw)))
            dict_index = len(dicts)
        codec = ZSTD_DICT if dict_index else cfg.get('codec', ZSTD)
        runs = []
        per = cfg.get('run_values', 5)
        for r0 in range(0, len(values), per):
            rv = values[r0:r0 + per]
            raw = uvarint(len(rv)) + b''.join(uvarint(len(v)) for v in rv) + b''.join(rv)
            stored = raw if codec == NONE else zstd_frame(raw, dict_bytes)
            off = w.add(record(3, 0, codec, 0, len(rv), raw, stored), len(raw), len(stored))
            runs.append(uvarint(off) + uvarint(len(stored)) + uvarint(len(raw)) + uvarint(len(rv)))
        blob_desc.append(uvarint(ci) + uvarint(dict_index) + bytes([codec]) + uvarint(len(runs))
                         + b''.join(runs))
    invert = search_region(w, search, hflags) if search else None
    # the dictionary region precedes blob runs here only in writer order terms;
    # every part is addressed by footer offsets, so readers do not care
    if blob_desc:
        sections.append((3, uvarint(len(blob_desc)) + b''.join(blob_desc)))
    if dicts:
        sections.append((4, uvarint(len(dicts)) + b''.join(uvarint(o) + uvarint(n) for o, n in dicts)))
    if invert:
        sections.append((8, invert))
    pairs = [('tatami.version', '1.1')] + list(kv)
    sections.append((6, uvarint(len(pairs)) + b''.join(lenbytes(k.encode()) + lenbytes(v.encode())
                                                       for k, v in pairs)))
    sections.append((7, uvarint(nrows) + uvarint(w.raw_total) + uvarint(w.stored_total)))
    footer = b'\x00' + b''.join(uvarint(t) + lenbytes(b) for t, b in sections)
    foff = w.at()
    flags = hflags
    if any(c['type'] == 'blobref' for c in columns):
        flags |= 2
    if dicts:
        flags |= 4
    if any(c.get('flags', 0) & 2 for c in columns):
        flags |= 1
    hdr = b'TAT1' + struct.pack('<HHHBBI', 1, 1, flags, 1, 2, 0) + bytes(range(1, 17)) \
        + struct.pack('<QQQI', nrows, foff, 1700000000000, 7)
    hdr += struct.pack('<I', crc32c(hdr))
    w.body[0:64] = hdr
    data = bytes(w.body) + footer + struct.pack('<II', len(footer), crc32c(footer)) + b'TAT1'
    Path(path).write_bytes(data)


def search_region(w, s, hflags):
    """Term dictionary, postings, skips and live-docs records (spec §15)."""
    terms = sorted(s['postings'])
    lists, entries = [], []
    for t in terms:
        post = s['postings'][t]
        if len(post) == 1:
            entries.append(uvarint(1) + b'\x01' + uvarint(post[0][0]) + uvarint(post[0][1]))
        else:
            entries.append(uvarint(len(post)) + b'\x00' + uvarint(len(lists)))
            lists.append(post)
    if hflags & 0x20:
        blocks, index = bytearray(), bytearray()
        for b0 in range(0, len(terms), 4):
            raw, prev = bytearray(), b''
            for t, e in zip(terms[b0:b0 + 4], entries[b0:b0 + 4]):
                tb = t.encode()
                p = 0
                while p < min(len(prev), len(tb)) and prev[p] == tb[p]:
                    p += 1
                raw += uvarint(p) + lenbytes(tb[p:]) + e
                prev = tb
            comp = zstandard.ZstdCompressor().compress(bytes(raw))
            index += lenbytes(terms[b0].encode()) + uvarint(len(blocks)) + uvarint(len(comp)) + uvarint(len(raw))
            blocks += comp
        nblocks = (len(terms) + 3) // 4
        tdict = b'\x02' + uvarint(4) + uvarint(len(terms)) + uvarint(nblocks) + uvarint(len(index)) + index + blocks
    else:
        tdict = uvarint(len(terms)) + b''.join(lenbytes(t.encode()) + e for t, e in zip(terms, entries))
    pdata, skips = [], []
    for post in lists:
        data, sk = bytearray(), []
        for b0 in range(0, len(post), 128):
            blk = post[b0:b0 + 128]
            gaps = [b[0] - a[0] for a, b in zip(blk, blk[1:])]
            off = len(data)
            if len(blk) == 128:
                gw = min_width(max(gaps))
                data += bytes([gw]) + pack(gaps, gw)
            else:
                data += enc_gvi(gaps)
            freqs = [f for _, f in blk]
            data += enc_pfor(freqs, min(32, min_width(max(freqs))))
            sk.append(uvarint(blk[0][0]) + uvarint(blk[-1][0]) + uvarint(max(freqs)) + uvarint(off) + uvarint(len(blk)))
        pdata.append(bytes(data))
        skips.append(uvarint(len(post)) + uvarint(len(sk)) + b''.join(sk))
    postings = uvarint(len(lists)) + b''.join(lenbytes(d) for d in pdata)
    skipsrun = uvarint(len(lists)) + b''.join(skips)
    offs = []
    for payload in (tdict, postings, skipsrun):
        offs.append((w.add(record(2, 0, NONE, 0, 0, payload, payload)), len(payload)))
    live = (0, 0)
    if s.get('deleted') is not None:
        n = s['num_docs']
        words = [0] * ((n + 63) // 64)
        for d in range(n):
            if d not in s['deleted']:
                words[d // 64] |= 1 << (d % 64)
        payload = uvarint(n) + b''.join(struct.pack('<Q', x) for x in words)
        live = (w.add(record(2, 0, NONE, 0, 0, payload, payload)), len(payload))
    out = b''.join(uvarint(o) + uvarint(n) for o, n in offs)
    return out + uvarint(len(terms)) + uvarint(s['num_docs']) + uvarint(live[0]) + uvarint(live[1])

# ---- the test set -----------------------------------------------------------

def alltypes_columns(n):
    def nulls_every(k, f):
        return [None if i % k == 0 else f(i) for i in range(n)]
    allnull_first = [None if i < 40 else i for i in range(n)]  # whole first pages null
    return [
        dict(name='b', type='bool', flags=1, values=nulls_every(5, lambda i: i % 3 == 0), encs=[BITMAP, PLAIN]),
        dict(name='i8', type='int8', values=[(i % 200) - 100 for i in range(n)], encs=[PLAIN, BITPACK, DELTA, RLE]),
        dict(name='i16', type='int16', flags=1, values=nulls_every(7, lambda i: -i * 13), encs=[DELTA, BITPACK, PLAIN]),
        dict(name='i32', type='int32', flags=1, values=allnull_first, encs=[GVI, PFOR, RLE, BITPACK]),
        dict(name='i64', type='int64', flags=2, values=[i * 3 - 50 for i in range(n)], encs=[DELTA, PLAIN, BITPACK]),
        dict(name='u8', type='uint8', values=[7 if i % 30 < 20 else i % 256 for i in range(n)], encs=[RLE, PFOR]),
        dict(name='u16', type='uint16', values=[(i * 37) % 65536 for i in range(n)], encs=[GVI, PFOR, BITPACK]),
        dict(name='u32', type='uint32', values=[(i * 100003) % (1 << 32) for i in range(n)], encs=[GVI, DELTA, PLAIN]),
        dict(name='u64', type='uint64', values=[(1 << 63) + i * 99 for i in range(n)], encs=[DELTA, BITPACK, RLE]),
        dict(name='f32', type='float32', values=[[0.5, -1.25, 1e-7, 3.0e21, 100.0, -0.0][i % 6] for i in range(n)]),
        dict(name='f64', type='float64', flags=1,
             values=[None if i % 11 == 0 else [0.1, 2.5e-9, 1e21, 123456.789, float('nan'), float('inf')][i % 6] for i in range(n)],
             codecs=[NONE, ZSTD]),
        dict(name='s', type='string', flags=1,
             values=nulls_every(4, lambda i: ['row %d' % i, 'a<b>&c\n"q"', 'caf\u00e9 \u2028', '\x01tab\t'][i % 4]),
             codecs=[ZSTD, NONE]),
        dict(name='by', type='bytes', values=[bytes([i % 256, 0, 255]) * (i % 3) for i in range(n)],
             codecs=[LZ4, ZSTD]),
        dict(name='ts', type='timestamp_micros', values=[1700000000000000 + i * 1001 for i in range(n)], encs=[DELTA, PLAIN]),
        dict(name='odd/name%', type='uint8', flags=1, values=[None] * n, encs=[RLE]),
    ]


def blob_columns(n):
    return [
        dict(name='id', type='int64', values=list(range(n)), encs=[DELTA]),
        dict(name='doc', type='blobref', flags=1 | 4,
             values=[None if i % 6 == 0 else ('document %d body text ' % i * (i % 4 + 1)).encode() for i in range(n)]),
        dict(name='raw', type='blobref', flags=4, values=[bytes([i % 256]) * (i % 5) for i in range(n)]),
    ]


def search_docs(n):
    words = ['alpha', 'beta', 'gamma', 'delta', 'epsilon']
    postings = {}
    for d in range(n):
        for k, wd in enumerate(words):
            if d % (k + 1) == 0:
                postings.setdefault(wd, []).append((d, 1 + (d + k) % 5))
        postings['solo%d' % d] = [(d, 1)] if d % 50 == 0 else postings.get('solo%d' % d, [])
    postings = {k: v for k, v in postings.items() if v}
    cols = [
        dict(name='doc_id', type='string', values=['%064x' % d for d in range(n)]),
        dict(name='url', type='string', values=['https://e.example/%d' % d for d in range(n)]),
        dict(name='title', type='string', values=['Title %d' % d for d in range(n)]),
        dict(name='body', type='blobref', flags=4, values=[('body of %d ' % d).encode() * 3 for d in range(n)]),
        dict(name='norm_body', type='uint16', values=[3] * n, encs=[RLE]),
        dict(name='norm_title', type='uint16', values=[2] * n, encs=[RLE]),
        dict(name='norm_anchor', type='uint16', values=[1] * n, encs=[RLE]),
        dict(name='norm_url', type='uint16', values=[4] * n, encs=[RLE]),
    ]
    return cols, postings


def expect(path, columns, groups, search=None):
    def jv(v):
        if isinstance(v, bytes):
            return {'hex': v.hex()}
        if isinstance(v, float) and (v != v or v in (float('inf'), float('-inf'))):
            return {'float': repr(v)}
        return v
    e = {'groups': groups, 'columns': [dict(name=c['name'], type=c['type'], values=[jv(v) for v in c['values']])
                                       for c in columns]}
    if search:
        live = lambda d: d not in (search.get('deleted') or ())
        e['postings'] = {t: [p for p in ps if live(p[0])] for t, ps in search['postings'].items()}
        e['df'] = {t: len(ps) for t, ps in search['postings'].items()}
        e['deleted'] = sorted(search.get('deleted') or [])
    Path(str(path) + '.expect.json').write_text(json.dumps(e))


def write_all(out):
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    n = 300
    cols = alltypes_columns(n)
    write_file(out / 'w_alltypes.tatami', cols, [120, 100, 80], 40, kv=[('source', 'writer')])
    expect(out / 'w_alltypes.tatami', cols, [120, 100, 80])
    cols = blob_columns(60)
    cfg = {'doc': {'dict': True, 'run_values': 7}, 'raw': {'codec': NONE, 'run_values': 9}}
    write_file(out / 'w_blob.tatami', cols, [25, 35], 10, blob_cfg=cfg)
    expect(out / 'w_blob.tatami', cols, [25, 35])
    cols, post = search_docs(300)
    for name, flags, deleted in [('w_search_tree', 0x30, {3, 64, 100, 299}), ('w_search_flat', 0x10, None)]:
        s = {'postings': post, 'num_docs': 300, 'deleted': deleted}
        write_file(out / (name + '.tatami'), cols, [300], 128, blob_cfg={'body': {'codec': ZSTD}},
                   search=s, hflags=flags | 0x08)
        expect(out / (name + '.tatami'), cols, [300], s)
    cols = [dict(name='k', type='string', flags=2, values=[]), dict(name='l', type='list', element=3, values=[]),
            dict(name='d', type='blobref', flags=1, values=[])]
    write_file(out / 'w_empty.tatami', cols, [], 10)
    expect(out / 'w_empty.tatami', cols, [])


def write_sample(out):
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    cols = [dict(name='id', type='int64', flags=2, values=list(range(8)), encs=[DELTA]),
            dict(name='price', type='float64', values=[9.5, 12.25, None, 3.0, 0.5, 7.75, 1.0, 2.0]),
            dict(name='title', type='string', values=['apple', 'pear', 'fig', None, 'kiwi', 'plum', 'lime', 'date']),
            dict(name='page', type='blobref', flags=5, values=[('<p>page %d</p>\n' % i).encode() for i in range(8)])]
    cols[1]['flags'] = 1
    cols[2]['flags'] = 1
    write_file(out / 'sample.tatami', cols, [5, 3], 4, blob_cfg={'page': {'dict': True, 'run_values': 3}})


def main():
    import argparse
    ap = argparse.ArgumentParser(description="Test-data writer for .tatami columnar files.")
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument('--sample', metavar='DIR', help='write one small sample file into DIR')
    g.add_argument('outdir', nargs='?', help='write every test file into this directory')
    a = ap.parse_args()
    if a.sample:
        write_sample(a.sample)
    else:
        write_all(a.outdir)


if __name__ == '__main__':
    main()
