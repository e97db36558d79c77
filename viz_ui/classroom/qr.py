"""The class link as a QR code to project (segno: pure Python; no Streamlit here)."""

from __future__ import annotations

import io

import segno


def qr_png(link: str, scale: int = 8) -> bytes:
    """A PNG of the QR code of ``link``: black modules on white with the standard 4-module quiet zone (phones read
    a dark code on a light ground, whatever the page's theme), ``scale`` pixels per module, error correction level
    M (15 % of the code may be unreadable, e.g. a projector's glare).

    Raises:
        segno.DataOverflowError: ``link`` is longer than a QR code holds (about 2,300 characters at level M).
    """
    out = io.BytesIO()
    segno.make(link, error="m", boost_error=False).save(out, kind="png", scale=scale, border=4, dark="#000",
                                                         light="#fff")
    return out.getvalue()
