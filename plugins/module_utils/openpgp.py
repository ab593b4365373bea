# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""Fingerprints of the primary keys in an OpenPGP public key block (pure functions).

Used to check a downloaded repository key before it is trusted, without a gpg keyring on the
node. Implements RFC 4880 (v4 keys: SHA-1 over 0x99, a 2-byte length and the key packet body).
"""

from __future__ import absolute_import, division, print_function

import base64
import binascii
import hashlib

__metaclass__ = type

_PUBLIC_KEY = 6


def _dearmor(text):
    lines = text.strip().splitlines()
    try:
        start = lines.index("-----BEGIN PGP PUBLIC KEY BLOCK-----")
        end = lines.index("-----END PGP PUBLIC KEY BLOCK-----")
    except ValueError:
        raise ValueError("not an ASCII-armored OpenPGP public key block") from None
    body = lines[start + 1 : end]
    # Armor headers end at the first empty line; the checksum line starts with '='.
    if "" in body:
        body = body[body.index("") + 1 :]
    data = "".join(line.strip() for line in body if not line.startswith("="))
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("the key block is not valid base64") from None


def _packets(data):
    pos = 0
    while pos < len(data):
        tag_byte = data[pos]
        if not tag_byte & 0x80:
            raise ValueError("malformed OpenPGP packet header")
        if tag_byte & 0x40:  # new format
            tag = tag_byte & 0x3F
            first = data[pos + 1]
            if first < 192:
                length, header = first, 2
            elif first < 224:
                length, header = ((first - 192) << 8) + data[pos + 2] + 192, 3
            elif first == 255:
                length, header = int.from_bytes(data[pos + 2 : pos + 6], "big"), 6
            else:
                raise ValueError("partial-length packets do not occur in key blocks")
        else:  # old format
            tag = (tag_byte >> 2) & 0x0F
            size = [1, 2, 4][tag_byte & 0x03] if tag_byte & 0x03 != 3 else None
            if size is None:
                raise ValueError("indeterminate-length packets do not occur in key blocks")
            length, header = int.from_bytes(data[pos + 1 : pos + 1 + size], "big"), 1 + size
        body = data[pos + header : pos + header + length]
        if len(body) != length:
            raise ValueError("truncated OpenPGP packet")
        yield tag, body
        pos += header + length


def key_fingerprints(armored):
    """Upper-case hex fingerprints of the primary keys in ``armored``; ValueError when unreadable."""
    return _fingerprints(_dearmor(armored))


def _fingerprints(data):
    fingerprints = []
    for tag, body in _packets(data):
        if tag != _PUBLIC_KEY:
            continue
        if not body or body[0] != 4:
            raise ValueError(f"OpenPGP key version {body[0] if body else '?'} is not supported (v4 only)")
        prefix = b"\x99" + len(body).to_bytes(2, "big")
        fingerprints.append(hashlib.sha1(prefix + body, usedforsecurity=False).hexdigest().upper())
    if not fingerprints:
        raise ValueError("the key block holds no public key")
    return fingerprints


def keyring_fingerprints(data):
    """Fingerprints of the primary keys in a keyring file's bytes: ASCII-armored (``.asc``) or binary,
    as ``gpg --dearmor`` writes it (AMD's ``/etc/apt/keyrings/rocm.gpg``); ValueError when unreadable."""
    if data.lstrip().startswith(b"-----BEGIN PGP"):
        return key_fingerprints(data.decode("ascii", "replace"))
    try:
        return _fingerprints(data)
    except IndexError:
        raise ValueError("truncated OpenPGP packet header") from None
