"""Decrypt MindSpore's encrypted MINDIR and .ckpt files (``mindspore/core/utils/crypto.cc``).

``export(..., enc_key=16/24/32 bytes, enc_mode=...)`` encrypts the serialized file in blocks of
at most 64 MiB of plaintext. Each block is, with little-endian int32 fields::

    magic · [tag(16), AES-GCM only] · block_len · iv_len · iv[iv_len] · cipher_len · cipher

with ``block_len = 4 + iv_len + 4 + cipher_len``. The magic names the mode: AES-GCM
``0x7F3A5ED8``, AES-CBC ``0x7F3A5ED9`` (PKCS#7 padding), SM4-CBC ``0x7F3A5EDA``. GCM's nonce is
the first 12 bytes of the stored 16-byte IV (OpenSSL's default GCM IV length; checked against
files written by MindSpore 2.10), with no associated data. Decryption uses the ``cryptography``
package, which is needed only for encrypted files.
"""

from __future__ import annotations

import struct

from converter.mindspore.errors import EncryptedModelError

MAGICS = {0x7F3A5ED8: "AES-GCM", 0x7F3A5ED9: "AES-CBC", 0x7F3A5EDA: "SM4-CBC"}
TAG_BYTES = 16
GCM_NONCE_BYTES = 12
KEY_SIZES = {"AES-GCM": (16, 24, 32), "AES-CBC": (16, 24, 32), "SM4-CBC": (16,)}


def encryption_mode(data: bytes) -> str | None:
    """The mode named by the first block's magic, or None for a plain file."""
    if len(data) < 4:
        return None
    return MAGICS.get(struct.unpack_from("<I", data, 0)[0])


def decrypt(data: bytes, key: bytes, mode: str | None, what: str) -> bytes:
    """The plaintext of an encrypted file; ``mode`` (e.g. "AES-GCM") must match the file's."""
    found = encryption_mode(data)
    if found is None:
        raise EncryptedModelError(f"{what}: not an encrypted MindSpore file (no block magic)")
    if mode is not None and mode.upper() != found:
        raise EncryptedModelError(
            f"{what}: encrypted with {found}, but dec_mode={mode!r} was given; use dec_mode={found!r}"
        )
    if len(key) not in KEY_SIZES[found]:
        raise EncryptedModelError(
            f"{what}: a {found} key must be {' or '.join(map(str, KEY_SIZES[found]))} bytes, got {len(key)}"
        )
    plain = bytearray()
    offset = 0
    index = 0
    while offset < len(data):
        block, offset = _read_block(data, offset, found, what, index)
        plain += _decrypt_block(block, key, found, what, index)
        index += 1
    return bytes(plain)


def _read_block(data: bytes, offset: int, mode: str, what: str, index: int) -> tuple[dict, int]:
    def take(size: int) -> bytes:
        nonlocal offset
        if size < 0 or offset + size > len(data):
            raise EncryptedModelError(f"{what}: encrypted block {index} is truncated; the file is damaged")
        piece = data[offset : offset + size]
        offset += size
        return piece

    magic = struct.unpack("<I", take(4))[0]
    if MAGICS.get(magic) != mode:
        raise EncryptedModelError(f"{what}: encrypted block {index} has a bad magic {magic:#x}; the file is damaged")
    tag = take(TAG_BYTES) if mode == "AES-GCM" else b""
    block_len = struct.unpack("<i", take(4))[0]
    iv_len = struct.unpack("<i", take(4))[0]
    if iv_len != 16:
        raise EncryptedModelError(f"{what}: encrypted block {index} has an IV of {iv_len} bytes, expected 16")
    iv = take(iv_len)
    cipher_len = struct.unpack("<i", take(4))[0]
    if block_len != 4 + iv_len + 4 + cipher_len:
        raise EncryptedModelError(
            f"{what}: encrypted block {index} lengths disagree (block {block_len}, cipher {cipher_len})"
        )
    return {"tag": tag, "iv": iv, "cipher": take(cipher_len)}, offset


def _decrypt_block(block: dict, key: bytes, mode: str, what: str, index: int) -> bytes:
    try:
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives import padding
        from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError as err:
        raise EncryptedModelError(
            f"{what}: decrypting {mode} needs the 'cryptography' package: pip install cryptography"
        ) from err
    if mode == "AES-GCM":
        try:
            return AESGCM(key).decrypt(block["iv"][:GCM_NONCE_BYTES], block["cipher"] + block["tag"], None)
        except InvalidTag as err:
            raise EncryptedModelError(
                f"{what}: AES-GCM authentication failed in block {index}: wrong key, or the file is damaged"
            ) from err
    algorithm = algorithms.AES(key) if mode == "AES-CBC" else algorithms.SM4(key)
    if len(block["cipher"]) % 16:
        raise EncryptedModelError(f"{what}: {mode} block {index} is not a whole number of 16-byte blocks")
    decryptor = Cipher(algorithm, modes.CBC(block["iv"])).decryptor()
    padded = decryptor.update(block["cipher"]) + decryptor.finalize()
    unpadder = padding.PKCS7(128).unpadder()
    try:
        return unpadder.update(padded) + unpadder.finalize()
    except ValueError as err:
        raise EncryptedModelError(
            f"{what}: {mode} padding is invalid in block {index}: wrong key, or the file is damaged"
        ) from err
