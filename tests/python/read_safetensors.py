#!/usr/bin/env python3
"""An independent safetensors reader, using only the standard library (json, struct).

    python3 tests/python/read_safetensors.py FILE

Checks the layout (8-byte little-endian header length, JSON header, tensors
tiling the data after it) and prints one line per tensor, in data order:

    name<TAB>dtype<TAB>shape<TAB>sum

with the sum exact for integers and math.fsum (correctly rounded) for floats,
then one line "__metadata__<TAB>key=value" per metadata entry other than
Tessera's checksums, which it checks with zlib's CRC-32 (metadata
"tessera.crc32": a JSON object, tensor name -> 8 hex digits) and reports as
"__checksums__<TAB>N matched". The C++ test
"checkpoint: a Tessera safetensors file reads in Python" runs it on a file that
Tessera wrote and compares the sums; exit status 1 and a message on stderr for
a malformed file.
"""
import json
import math
import struct
import sys
import zlib

# dtype -> (struct format character, bytes per element)
DTYPES = {"F32": ("f", 4), "BF16": ("H", 2), "I32": ("i", 4), "I64": ("q", 8)}


def fail(path, message):
    sys.stderr.write(f"read_safetensors.py: {path}: {message}\n")
    sys.exit(1)


def values(dtype, raw):
    fmt, size = DTYPES[dtype]
    count = len(raw) // size
    items = struct.unpack(f"<{count}{fmt}", raw)
    if dtype == "BF16":  # the upper half of an IEEE f32
        return [struct.unpack("<f", struct.pack("<I", bits << 16))[0] for bits in items]
    return list(items)


def main():
    if len(sys.argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    path = sys.argv[1]
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        fail(path, f"{len(blob)} bytes: too short for the header length")
    (header_len,) = struct.unpack("<Q", blob[:8])
    if 8 + header_len > len(blob):
        fail(path, f"header length {header_len} exceeds the file")
    if header_len % 8 != 0:
        fail(path, f"header length {header_len} is not padded to a multiple of 8")
    header = json.loads(blob[8 : 8 + header_len].decode("utf-8"))
    data = blob[8 + header_len :]
    metadata = header.pop("__metadata__", {})
    checksums = json.loads(metadata.pop("tessera.crc32", "{}"))
    matched = 0
    entries = sorted(header.items(), key=lambda item: tuple(item[1]["data_offsets"]))
    covered = 0
    lines = []
    for name, info in entries:
        dtype, shape, (begin, end) = info["dtype"], info["shape"], info["data_offsets"]
        if dtype not in DTYPES:
            fail(path, f"tensor {name!r}: unexpected dtype {dtype!r}")
        count = math.prod(shape)
        if end - begin != count * DTYPES[dtype][1]:
            fail(path, f"tensor {name!r}: {end - begin} bytes for shape {shape} of {dtype}")
        if begin != end:
            if begin != covered:
                fail(path, f"tensor {name!r}: begins at {begin}, expected {covered}")
            covered = end
        if name in checksums:
            found = f"{zlib.crc32(data[begin:end]):08x}"
            if found != checksums[name]:
                fail(path, f"tensor {name!r}: CRC-32 {found}, but the header records {checksums[name]}")
            matched += 1
        items = values(dtype, data[begin:end])
        total = sum(items) if dtype in ("I32", "I64") else math.fsum(items)
        lines.append(f"{name}\t{dtype}\t{json.dumps(shape)}\t{total!r}")
    if covered != len(data):
        fail(path, f"the tensors cover {covered} of {len(data)} data bytes")
    for line in lines:
        print(line)
    for key, value in sorted(metadata.items()):
        print(f"__metadata__\t{key}={value}")
    if checksums:
        print(f"__checksums__\t{matched} matched")
    return 0


if __name__ == "__main__":
    sys.exit(main())
