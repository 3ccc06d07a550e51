//! A broker the test can take down and bring back: a private tansu (the
//! binary in FLEETDP_TANSU, set by tests/run.sh) behind a TCP proxy that it
//! advertises as its address, so every client connection goes through the
//! proxy; an outage closes every connection and refuses new ones, as a
//! stopped broker does, while the broker's in-memory data survives. Without
//! FLEETDP_TANSU, librdkafka's mock cluster, whose broker can be set down
//! and up.

use super::{free_port, Broker};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::DefaultProducerContext;
use std::net::SocketAddr;
use std::process::Child;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

pub struct OutageBroker {
    pub broker: Broker,
    kind: Kind,
}

enum Kind {
    Tansu {
        child: Child,
        proxy: SocketAddr,
        upstream: SocketAddr,
        tasks: Option<tokio::task::JoinHandle<()>>,
    },
    /// The mock cluster lives in `broker`.
    Mock,
}

/// Accept on `listener` and pipe each connection to `upstream` until aborted
/// (aborting drops every socket).
async fn proxy(listener: TcpListener, upstream: SocketAddr) {
    let mut conns = JoinSet::new();
    loop {
        let Ok((mut client, _)) = listener.accept().await else {
            continue;
        };
        conns.spawn(async move {
            if let Ok(mut server) = TcpStream::connect(upstream).await {
                let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
            }
        });
        while conns.try_join_next().is_some() {}
    }
}

impl OutageBroker {
    /// Call inside a tokio runtime.
    pub async fn start() -> OutageBroker {
        let Some(tansu) = std::env::var_os("FLEETDP_TANSU").filter(|s| !s.is_empty()) else {
            let mock = MockCluster::new(1).expect("mock cluster");
            return OutageBroker {
                broker: Broker {
                    brokers: mock.bootstrap_servers(),
                    mock: Some(mock),
                    properties: vec![],
                },
                kind: Kind::Mock,
            };
        };
        let (pp, up) = (free_port(), free_port());
        let proxy: SocketAddr = format!("127.0.0.1:{pp}").parse().unwrap();
        let upstream: SocketAddr = format!("127.0.0.1:{up}").parse().unwrap();
        let child = super::front::tansu_at(&tansu, up, pp);
        for _ in 0..100 {
            if TcpStream::connect(upstream).await.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let mut b = OutageBroker {
            broker: Broker::external(proxy.to_string()),
            kind: Kind::Tansu {
                child,
                proxy,
                upstream,
                tasks: None,
            },
        };
        b.up().await;
        b
    }

    fn mock(&self) -> &MockCluster<'static, DefaultProducerContext> {
        self.broker.mock.as_ref().expect("a mock cluster")
    }

    /// Which broker this is, for messages.
    pub fn describe(&self) -> &'static str {
        match self.kind {
            Kind::Tansu { .. } => "tansu behind a proxy",
            Kind::Mock => "the mock cluster",
        }
    }

    /// The broker goes away: connections drop, new ones are refused.
    pub fn down(&mut self) {
        match &mut self.kind {
            Kind::Tansu { tasks, .. } => {
                if let Some(t) = tasks.take() {
                    t.abort();
                }
            }
            Kind::Mock => self.mock().broker_down(-1).expect("mock broker down"),
        }
    }

    /// The broker is back.
    pub async fn up(&mut self) {
        match &mut self.kind {
            Kind::Tansu {
                proxy,
                upstream,
                tasks,
                ..
            } => {
                // The aborted listener's port is released asynchronously.
                let listener = loop {
                    match TcpListener::bind(*proxy).await {
                        Ok(l) => break l,
                        Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                    }
                };
                *tasks = Some(tokio::spawn(proxy_task(listener, *upstream)));
            }
            Kind::Mock => self.mock().broker_up(-1).expect("mock broker up"),
        }
    }
}

async fn proxy_task(listener: TcpListener, upstream: SocketAddr) {
    proxy(listener, upstream).await
}

impl Drop for OutageBroker {
    fn drop(&mut self) {
        if let Kind::Tansu { child, tasks, .. } = &mut self.kind {
            if let Some(t) = tasks.take() {
                t.abort();
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
