# Copyright: instinct.finetune contributors
# Apache License 2.0 (see LICENSE)
"""OpenPGP public keys as apt trusts them: their fingerprints, and the one key a pin names (pure functions).

Used to check a downloaded repository key before it is trusted, without a gpg keyring on the node.
Implements RFC 4880 (v4 keys: SHA-1 over 0x99, a 2-byte length and the key packet body; ASCII armor
with its CRC-24).

Every key in a keyring apt names with ``signed-by`` may sign for that repository, and apt (``apt-key``'s
dearmor, like ``gpg --dearmor``) reads every armored block of an ``.asc`` file. So a download is read
whole, every block and every primary key, and only the key whose fingerprint is pinned may reach the
keyring: ``pin_problem`` refuses a download that holds any other, ``pinned_key`` checks what
``gpg --export <pin>`` made of it (the action plugin ``pinned_key`` runs gpg) and ``armor`` writes it.
"""

from __future__ import absolute_import, division, print_function

import base64
import binascii
import hashlib
import re

__metaclass__ = type

_PUBLIC_KEY = 6
_PUBLIC_SUBKEY = 14
_BLOCK = "PUBLIC KEY BLOCK"
_ARMOR_LINE = re.compile(r"^-----(BEGIN|END) PGP ([A-Z0-9 ,/]+)-----$")
_FINGERPRINT = re.compile(r"^[0-9A-F]{40}$")


def _crc24(data):
    crc = 0xB704CE
    for byte in data:
        crc ^= byte << 16
        for _bit in range(8):
            crc <<= 1
            if crc & 0x1000000:
                crc ^= 0x1864CFB
    return crc & 0xFFFFFF


def _dearmor(text):
    """The bytes of every ASCII-armored public key block in ``text``, one after the other.

    Text around the blocks is ignored, as gpg and apt ignore it; a block of another kind (a private
    key, a message, a signature), a block without its end line, a bad base64 body or a checksum that
    does not match is refused: what apt would read from such a file is not what was checked."""
    blocks = []
    current = None
    for raw in text.splitlines():
        line = raw.strip()
        marker = _ARMOR_LINE.match(line)
        if current is None:
            if not marker:
                continue
            if marker.group(1) != "BEGIN" or marker.group(2) != _BLOCK:
                raise ValueError(f"the text holds a PGP {marker.group(2).lower()}, where only public keys belong")
            current = []
        elif marker:
            if marker.group(1) != "END" or marker.group(2) != _BLOCK:
                raise ValueError("an armored public key block is not closed by its END line")
            blocks.append(_decode_block(current))
            current = None
        else:
            current.append(line)
    if current is not None:
        raise ValueError("an armored public key block is not closed by its END line")
    if not blocks:
        raise ValueError("not an ASCII-armored OpenPGP public key block")
    return b"".join(blocks)


def _decode_block(lines):
    # Armor headers ("Version: ...", "Comment: ...") end at the first empty line; a block without
    # headers may have none. The checksum line starts with '=', which no base64 line does.
    if "" in lines:
        lines = lines[lines.index("") + 1 :]
    elif lines and ": " in lines[0]:
        raise ValueError("the armor headers of a key block are not followed by an empty line")
    body = [line for line in lines if line and not line.startswith("=")]
    crc_lines = [line[1:] for line in lines if line.startswith("=")]
    try:
        data = base64.b64decode("".join(body), validate=True)
        checksum = base64.b64decode(crc_lines[0], validate=True) if crc_lines else None
    except (binascii.Error, ValueError):
        raise ValueError("the key block is not valid base64") from None
    if checksum is not None and int.from_bytes(checksum, "big") != _crc24(data):
        raise ValueError("the key block's checksum (CRC-24) does not match its content")
    return data


def armor(data):
    """``data`` (binary OpenPGP packets) as one ASCII-armored public key block with its CRC-24, the form
    of an ``.asc`` keyring; the same bytes always give the same text."""
    encoded = base64.b64encode(data).decode("ascii")
    lines = [encoded[pos : pos + 64] for pos in range(0, len(encoded), 64)]
    checksum = base64.b64encode(_crc24(data).to_bytes(3, "big")).decode("ascii")
    return "\n".join([f"-----BEGIN PGP {_BLOCK}-----", "", *lines, f"={checksum}", f"-----END PGP {_BLOCK}-----", ""])


def _packets(data):
    pos = 0
    while pos < len(data):
        tag_byte = data[pos]
        if not tag_byte & 0x80:
            raise ValueError("malformed OpenPGP packet header")
        if tag_byte & 0x40:  # new format
            tag = tag_byte & 0x3F
            first = _header_byte(data, pos + 1)
            if first < 192:
                length, header = first, 2
            elif first < 224:
                length, header = ((first - 192) << 8) + _header_byte(data, pos + 2) + 192, 3
            elif first == 255:
                length, header = int.from_bytes(_header_bytes(data, pos + 2, 4), "big"), 6
            else:
                raise ValueError("partial-length packets do not occur in key blocks")
        else:  # old format
            tag = (tag_byte >> 2) & 0x0F
            if tag_byte & 0x03 == 3:
                raise ValueError("indeterminate-length packets do not occur in key blocks")
            size = [1, 2, 4][tag_byte & 0x03]
            length, header = int.from_bytes(_header_bytes(data, pos + 1, size), "big"), 1 + size
        body = data[pos + header : pos + header + length]
        if len(body) != length:
            raise ValueError("truncated OpenPGP packet")
        yield tag, body
        pos += header + length


def _header_bytes(data, start, size):
    chunk = data[start : start + size]
    if len(chunk) != size:
        raise ValueError("truncated OpenPGP packet header")
    return chunk


def _header_byte(data, pos):
    return _header_bytes(data, pos, 1)[0]


def _fingerprint(body):
    if not body or body[0] != 4:
        raise ValueError(f"OpenPGP key version {body[0] if body else '?'} is not supported (v4 only)")
    prefix = b"\x99" + len(body).to_bytes(2, "big")
    return hashlib.sha1(prefix + body, usedforsecurity=False).hexdigest().upper()


def keys(data):
    """The transferable public keys in ``data`` (binary packets), in order: ``[{fingerprint, subkeys}]``,
    a key being its primary key packet and every packet up to the next one (RFC 4880, 11.1).
    ValueError when unreadable, when a packet comes before the first key, or when there is no key."""
    found = []
    for tag, body in _packets(data):
        if tag == _PUBLIC_KEY:
            found.append({"fingerprint": _fingerprint(body), "subkeys": []})
        elif not found:
            raise ValueError("the key block does not start with a public key")
        elif tag == _PUBLIC_SUBKEY:
            found[-1]["subkeys"].append(_fingerprint(body))
    if not found:
        raise ValueError("the key block holds no public key")
    return found


def _fingerprints(data):
    return [key["fingerprint"] for key in keys(data)]


def key_fingerprints(armored):
    """Upper-case hex fingerprints of the primary keys in every armored block of ``armored``, in order;
    ValueError when unreadable."""
    return _fingerprints(_dearmor(armored))


def keyring_fingerprints(data):
    """Fingerprints of the primary keys in a keyring file's bytes: ASCII-armored (``.asc``, every block)
    or binary, as ``gpg --dearmor`` writes it (AMD's ``/etc/apt/keyrings/rocm.gpg``); ValueError when
    unreadable."""
    if data.lstrip().startswith(b"-----BEGIN PGP"):
        return key_fingerprints(data.decode("ascii", "replace"))
    return _fingerprints(data)


def normalize_fingerprint(text):
    """A pinned fingerprint as 40 upper-case hex digits: spaces and a ``0x`` prefix dropped; ValueError
    for anything else (a short or long key ID pins nothing: many keys share one)."""
    value = re.sub(r"\s", "", str(text or "")).upper()
    if value.startswith("0X"):
        value = value[2:]
    if not _FINGERPRINT.match(value):
        raise ValueError(f"'{text}' is not a key fingerprint (40 hex digits, spaces allowed)")
    return value


def pin_problem(found, expected):
    """What is wrong with a download whose primary keys are ``found`` when only ``expected`` may be
    trusted, in words; ``""`` when it holds that key and no other (the same key twice is one key)."""
    others = [fpr for fpr in dict.fromkeys(found) if fpr != expected]
    if expected not in found:
        return f"has fingerprint(s) {', '.join(others) or 'none'}, not the expected {expected}"
    if others:
        return (
            f"holds {len(others)} key(s) beside the expected {expected}: {', '.join(others)}. Every key of a "
            "keyring may sign for the repositories that name it, so a download with any other key is refused"
        )
    return ""


def pinned_key(data, expected):
    """Check ``data``, the binary export of the pinned key (``gpg --export <pin>``): exactly one
    transferable key, the pinned one. Returns its ``{fingerprint, subkeys}``; ValueError otherwise."""
    if not data:
        raise ValueError(f"gpg kept no key {expected}: none of its user IDs has a self-signature that verifies")
    found = keys(data)
    if [key["fingerprint"] for key in found] != [expected]:
        raise ValueError(f"gpg exported {', '.join(key['fingerprint'] for key in found)} for {expected}")
    return found[0]
