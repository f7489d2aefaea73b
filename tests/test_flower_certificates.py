"""python -m fedlight.flower.certificates: a CA, the SuperLink's certificate for its addresses
and SuperNode key pairs in the formats Flower reads; never overwrites a key."""

from __future__ import annotations

import ipaddress

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from fedlight.flower.certificates import main


def test_the_files_are_what_the_superlink_and_the_supernodes_read(tmp_path, capsys):
    main([str(tmp_path / "certs"), "--host", "127.0.0.1", "--host", "link.example",
          "--supernodes", "2"])
    certs = tmp_path / "certs"
    assert sorted(p.name for p in certs.iterdir()) == [
        "ca.crt", "ca.key", "server.key", "server.pem", "supernode-0.key", "supernode-0.pub",
        "supernode-1.key", "supernode-1.pub"]
    ca = x509.load_pem_x509_certificate((certs / "ca.crt").read_bytes())
    server = x509.load_pem_x509_certificate((certs / "server.pem").read_bytes())
    server.verify_directly_issued_by(ca)  # raises unless the CA signed it
    names = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert names.get_values_for_type(x509.DNSName) == ["link.example"]
    # as flower-supernode --auth-supernode-private-key and flwr supernode register read them
    private = serialization.load_ssh_private_key((certs / "supernode-1.key").read_bytes(), None)
    public = serialization.load_ssh_public_key((certs / "supernode-1.pub").read_bytes())
    assert isinstance(private, ec.EllipticCurvePrivateKey)
    assert private.public_key().public_numbers() == public.public_numbers()
    assert (certs / "supernode-1.key").stat().st_mode & 0o077 == 0
    assert "wrote 8 files" in capsys.readouterr().out


def test_an_existing_key_is_never_overwritten(tmp_path, capsys):
    main([str(tmp_path), "--host", "127.0.0.1"])
    before = (tmp_path / "ca.key").read_bytes()
    with pytest.raises(SystemExit) as stop:
        main([str(tmp_path), "--host", "127.0.0.1", "--supernodes", "1"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: {tmp_path / 'ca.crt'} exists")
    assert (tmp_path / "ca.key").read_bytes() == before
    assert not (tmp_path / "supernode-0.key").exists()


def test_a_missing_host_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main([str(tmp_path / "x")])
    assert capsys.readouterr().err == (
        "error: give the SuperLink's address with --host (an IP address or a DNS name the "
        "SuperNodes use)\n")
    assert not (tmp_path / "x").exists()
