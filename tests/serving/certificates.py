"""Certificates for the TLS tests, made with ``cryptography``: a CA, a server certificate for
127.0.0.1 and localhost, a client certificate from the same CA, and a rogue CA with its own client
certificate (a stranger the server must not trust). Each is a PEM key and certificate on disk,
as the server and its clients read them."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass
class Identity:
    key: Path
    cert: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write(directory: Path, stem: str, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate) -> Identity:
    key_path, cert_path = directory / f"{stem}.key", directory / f"{stem}.crt"
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return Identity(key_path, cert_path)


def _certificate(subject: str, key, issuer_name: x509.Name, issuer_key, *, ca: bool,
                 usage=None, names: list | None = None) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _authority(directory: Path, stem: str) -> tuple[Identity, ec.EllipticCurvePrivateKey, x509.Name]:
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _certificate(f"{stem} CA", key, _name(f"{stem} CA"), key, ca=True)
    return _write(directory, stem, key, cert), key, cert.subject


def _leaf(directory: Path, stem: str, authority: tuple, usage, names: list | None = None) -> Identity:
    _, issuer_key, issuer_name = authority
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _certificate(stem, key, issuer_name, issuer_key, ca=False, usage=usage, names=names)
    return _write(directory, stem, key, cert)


@dataclass
class Pki:
    ca: Identity
    server: Identity
    client: Identity
    rogue_ca: Identity
    rogue_client: Identity


def make_pki(directory: Path) -> Pki:
    """The CA, server, client, rogue CA and rogue client identities, written to ``directory``."""
    authority = _authority(directory, "ca")
    rogue = _authority(directory, "rogue-ca")
    loopback = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
    return Pki(
        ca=authority[0],
        server=_leaf(directory, "server", authority, ExtendedKeyUsageOID.SERVER_AUTH, loopback),
        client=_leaf(directory, "client", authority, ExtendedKeyUsageOID.CLIENT_AUTH),
        rogue_ca=rogue[0],
        rogue_client=_leaf(directory, "rogue-client", rogue, ExtendedKeyUsageOID.CLIENT_AUTH),
    )
