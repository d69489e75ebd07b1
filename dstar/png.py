"""A minimal PNG writer (8-bit grayscale, zlib), so reports need no imaging library."""

import struct
import zlib
from pathlib import Path

import numpy as np

__all__ = ["write_png", "png_bytes", "image_grid"]


def _chunk(tag: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))


def write_png(path, img) -> None:
    """Write a 2-D uint8 array as a grayscale PNG."""
    Path(path).write_bytes(png_bytes(img))


def png_bytes(img) -> bytes:
    """A 2-D uint8 array as the bytes of a grayscale PNG file."""
    img = np.asarray(img)
    if img.ndim != 2 or img.dtype != np.uint8:
        raise ValueError(f"write_png needs a 2-D uint8 array, got {img.dtype} {img.shape}")
    h, w = img.shape
    raw = b"".join(b"\x00" + img[r].tobytes() for r in range(h))
    data = (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0))
            + _chunk(b"IDAT", zlib.compress(raw, 9)) + _chunk(b"IEND", b""))
    return data


def image_grid(rows, scale: int = 3, pad: int = 2) -> np.ndarray:
    """Tile a list of rows of ``(B, 1, H, W)`` images in [-1, 1] into one uint8 image."""
    rows = [np.asarray(r, dtype=np.float32)[:, 0] for r in rows]
    b, h, w = rows[0].shape
    hp, wp = h * scale + pad, w * scale + pad
    out = np.full((len(rows) * hp + pad, b * wp + pad), 128, dtype=np.uint8)
    for i, r in enumerate(rows):
        for j in range(b):
            px = np.clip((r[j] + 1) * 127.5, 0, 255).round().astype(np.uint8)
            px = np.kron(px, np.ones((scale, scale), dtype=np.uint8))
            out[pad + i * hp: pad + i * hp + h * scale, pad + j * wp: pad + j * wp + w * scale] = px
    return out
