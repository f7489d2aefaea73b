"""Certificates and keys for a Flower deployment with TLS and SuperNode authentication:

    python -m fedlight.flower.certificates FOLDER --host 10.0.0.5 --supernodes 3

writes into FOLDER a certificate authority (ca.crt, ca.key: keep ca.key offline), the
SuperLink's certificate for the addresses it is reached at (server.pem, server.key: --host,
repeatable, IP addresses or DNS names) and one key pair per SuperNode (supernode-<k>.key, in
OpenSSH format as flower-supernode --auth-supernode-private-key reads it, and
supernode-<k>.pub, which flwr supernode register takes). Keys are EC P-384 (Flower accepts
NIST curves for SuperNodes); certificates last 365 days by default. Existing files are never
overwritten: the command refuses a folder that already holds one of them.

The same files can come from openssl and ssh-keygen -t ecdsa -b 384 (Flower's documentation);
this module needs only the cryptography package that Flower already installs.
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import sys
from collections.abc import Sequence
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from fedlight.core.errors import ConfigError, FedlightError

CURVE = ec.SECP384R1()


def subject_name(hostname: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hostname)])


def alternative_name(host: str) -> x509.GeneralName:
    """host as a subject alternative name: an IP address, else a DNS name."""
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def certificate(subject: x509.Name, key: ec.EllipticCurvePrivateKey, issuer: x509.Name,
                signer: ec.EllipticCurvePrivateKey, days: int,
                extensions: Sequence[tuple[x509.ExtensionType, bool]]) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=days)))
    for extension, critical in extensions:
        builder = builder.add_extension(extension, critical)
    return builder.sign(signer, hashes.SHA384())


def pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def pem_certificate(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def supernode_key_pair() -> tuple[bytes, bytes]:
    """A SuperNode's private key (OpenSSH format) and public key (one OpenSSH line)."""
    key = ec.generate_private_key(CURVE)
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                serialization.NoEncryption())
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                           serialization.PublicFormat.OpenSSH)
    return private, public + b"\n"


def write_certificates(folder: str | Path, hosts: Sequence[str], supernodes: int,
                       days: int = 365) -> dict[str, Path]:
    """Write the files described in the module docstring into folder; returns them by name.

    Raises:
        ConfigError: no host, a negative supernode count, days < 1, or a file that exists.
    """
    if not hosts:
        raise ConfigError("give the SuperLink's address with --host (an IP address or a DNS "
                          "name the SuperNodes use)")
    if supernodes < 0 or days < 1:
        raise ConfigError(f"need --supernodes >= 0 and --days >= 1, got {supernodes} and {days}")
    folder = Path(folder)
    ca_key, server_key = ec.generate_private_key(CURVE), ec.generate_private_key(CURVE)
    ca_name = subject_name("fedlight federation CA")
    ca = certificate(ca_name, ca_key, ca_name, ca_key, days, [
        (x509.BasicConstraints(ca=True, path_length=0), True),
        (x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                       content_commitment=False, key_encipherment=False,
                       data_encipherment=False, key_agreement=False, encipher_only=False,
                       decipher_only=False), True)])
    server = certificate(subject_name(hosts[0]), server_key, ca_name, ca_key, days, [
        (x509.SubjectAlternativeName([alternative_name(h) for h in hosts]), False),
        (x509.BasicConstraints(ca=False, path_length=None), True),
        (x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False)])
    contents = {"ca.crt": pem_certificate(ca), "ca.key": pem_key(ca_key),
                "server.pem": pem_certificate(server), "server.key": pem_key(server_key)}
    for k in range(supernodes):
        contents[f"supernode-{k}.key"], contents[f"supernode-{k}.pub"] = supernode_key_pair()
    existing = [name for name in contents if (folder / name).exists()]
    if existing:
        raise ConfigError(f"{folder / existing[0]} exists; choose an empty folder (existing "
                          "keys are never overwritten)")
    folder.mkdir(parents=True, exist_ok=True)
    written = {}
    for name, data in contents.items():
        path = folder / name
        path.write_bytes(data)
        if name.endswith(".key"):
            path.chmod(0o600)
        written[name] = path
    return written


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m fedlight.flower.certificates",
        description="Write a CA, the SuperLink's TLS certificate and one authentication key "
                    "pair per SuperNode.")
    parser.add_argument("folder", help="where to write the files (must not hold them yet)")
    parser.add_argument("--host", action="append", default=[],
                        help="an address of the SuperLink (IP or DNS name); repeatable")
    parser.add_argument("--supernodes", type=int, default=0, help="key pairs to write")
    parser.add_argument("--days", type=int, default=365, help="certificate lifetime")
    options = parser.parse_args(argv)
    try:
        written = write_certificates(options.folder, options.host, options.supernodes,
                                     options.days)
    except FedlightError as error:  # one line, exit 2, nothing written
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    print(f"wrote {len(written)} files into {options.folder}")


if __name__ == "__main__":  # pragma: no cover
    main()


__all__ = ["main", "supernode_key_pair", "write_certificates"]
