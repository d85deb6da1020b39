//! Redis over TLS: [`SecureRedis`], and the self-signed certificates TLS servers use.

use std::process::Command;

use crate::ports::{free_port, wait_for_port};
use crate::redis::redis_cli;
use crate::spawned::Spawned;
use crate::unique::temp_dir;

/// A redis-server with a TLS port (a self-signed certificate for 127.0.0.1) and a plain port,
/// both requiring the password `s3cret-pw`, and an ACL user `app` with password `app-pw`.
#[derive(Debug)]
pub struct SecureRedis {
    /// The TLS port.
    pub tls_port: u16,
    /// The plain port.
    pub plain_port: u16,
    _server: Spawned,
}

impl SecureRedis {
    /// The server, accepting connections on both ports, with the user `app` created.
    pub fn start() -> Self {
        let dir = temp_dir("tls");
        make_certificate(&dir);
        let (tls_port, plain_port) = (free_port(), free_port());
        let (tls, plain) = (tls_port.to_string(), plain_port.to_string());
        let server = Spawned::start(
            "redis-server",
            &[
                "--port",
                &plain,
                "--tls-port",
                &tls,
                "--bind",
                "127.0.0.1",
                "--tls-cert-file",
                "cert.pem",
                "--tls-key-file",
                "key.pem",
                "--tls-ca-cert-file",
                "cert.pem",
                "--tls-auth-clients",
                "no",
                "--requirepass",
                "s3cret-pw",
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            dir,
            tls_port,
        );
        wait_for_port(plain_port);
        let created = redis_cli(
            plain_port,
            &[
                "-a",
                "s3cret-pw",
                "--no-auth-warning",
                "acl",
                "setuser",
                "app",
                "on",
                ">app-pw",
                "~*",
                "+@all",
            ],
        );
        assert_eq!(created.trim(), "OK");
        Self {
            tls_port,
            plain_port,
            _server: server,
        }
    }
}

/// A self-signed certificate for 127.0.0.1, `cert.pem` and `key.pem` in `dir` (openssl).
pub fn make_certificate(dir: &std::path::Path) {
    let status = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes"])
        .args(["-keyout", "key.pem", "-out", "cert.pem", "-days", "1"])
        .args([
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ])
        .current_dir(dir)
        .output()
        .expect("openssl must be installed (scripts/test.sh installs it)")
        .status;
    assert!(status.success(), "openssl could not make a certificate");
}

/// A CA and a certificate it signed for 127.0.0.1, in `dir`: `ca.pem`, `cert.pem` and
/// `key.pem` (openssl), for servers whose clients verify them against the CA.
pub fn make_signed_certificate(dir: &std::path::Path) {
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl").args(args).current_dir(dir).output();
        let out = out.expect("openssl must be installed (scripts/test.sh installs it)");
        assert!(out.status.success(), "openssl {args:?}");
    };
    let new_key = ["req", "-newkey", "rsa:2048", "-nodes", "-days", "1"];
    let ca = [
        "-x509", "-subj", "/CN=ca", "-keyout", "ca.key", "-out", "ca.pem",
    ];
    openssl(&[&new_key[..], &ca[..]].concat());
    let csr = ["-subj", "/CN=rls", "-keyout", "key.pem", "-out", "rls.csr"];
    openssl(&[&new_key[..], &csr[..]].concat());
    let ext = "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n";
    std::fs::write(dir.join("ext"), ext).expect("the certificate's extensions");
    openssl(&[
        "x509",
        "-req",
        "-in",
        "rls.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "cert.pem",
        "-days",
        "1",
        "-extfile",
        "ext",
    ]);
}
