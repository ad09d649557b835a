"""The bearer-token check of the gRPC port and the metrics endpoint: ``authorization: Bearer <token>``
(RFC 6750 section 2.1).

The scheme name is case-insensitive (RFC 7235 section 2.1), so ``bearer`` and ``BEARER`` are the
same scheme; one or more spaces may separate it from the token (``"Bearer" 1*SP b64token``), and
spaces after the token are not part of it (a b64token has none). The token is compared exactly, in
constant time.
"""

from __future__ import annotations

import hmac

SCHEME = b"bearer"


def carries_token(authorization: bytes, token: bytes) -> bool:
    """Whether the ``authorization`` value is the bearer scheme with exactly ``token``."""
    scheme, _, given = authorization.partition(b" ")
    given = given.strip(b" ")
    return scheme.lower() == SCHEME and hmac.compare_digest(given, token)
