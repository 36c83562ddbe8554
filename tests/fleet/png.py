"""A minimal PNG decoder (8-bit gray/RGB/RGBA, non-interlaced): enough to measure whether a
Chromium screenshot is blank without adding Pillow to the test dependencies."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

CHANNELS = {0: 1, 2: 3, 4: 2, 6: 4}


def _paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def _chunks(data: bytes) -> tuple[bytes, bytes]:
    """The IHDR body and the IDAT bodies joined, from a PNG's chunk stream."""
    pos, header, idat = 8, b"", b""
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    return header, idat


def _unfilter(kind: int, line: bytearray, prev: bytearray, channels: int) -> None:
    """Undo one scanline's filter in place (PNG filter types 1-4; 0 is none)."""
    for x in range(len(line)):
        a = line[x - channels] if x >= channels else 0
        b = prev[x]
        c = prev[x - channels] if x >= channels else 0
        if kind == 1:
            line[x] = (line[x] + a) & 0xFF
        elif kind == 2:
            line[x] = (line[x] + b) & 0xFF
        elif kind == 3:
            line[x] = (line[x] + (a + b) // 2) & 0xFF
        elif kind == 4:
            line[x] = (line[x] + _paeth(a, b, c)) & 0xFF


def decode(path: Path) -> tuple[int, int, int, list[bytes]]:
    """(width, height, channels, rows of raw bytes)."""
    data = path.read_bytes()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(f"{path} is not a PNG")
    header, idat = _chunks(data)
    width = height = depth = color = interlace = 0
    if header:
        width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", header)
    if depth != 8 or color not in CHANNELS or interlace:
        raise ValueError(f"unsupported PNG (depth {depth}, color {color}, interlace {interlace})")
    channels = CHANNELS[color]
    raw = zlib.decompress(idat)
    stride = width * channels
    rows: list[bytes] = []
    prev = bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        line = bytearray(raw[start + 1 : start + 1 + stride])
        _unfilter(raw[start], line, prev, channels)
        rows.append(bytes(line))
        prev = line
    return width, height, channels, rows


def gray_stats(path: Path, step: int = 4) -> tuple[float, int]:
    """(variance of gray levels, number of distinct colors) over a sampled grid."""
    width, height, channels, rows = decode(path)
    values: list[float] = []
    colors: set[bytes] = set()
    for y in range(0, height, step):
        row = rows[y]
        for x in range(0, width, step):
            pixel = row[x * channels : x * channels + min(channels, 3)]
            colors.add(pixel)
            values.append(sum(pixel) / len(pixel))
    mean = sum(values) / len(values)
    return sum((v - mean) ** 2 for v in values) / len(values), len(colors)
