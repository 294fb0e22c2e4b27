//! Exposes this crate's metrics to Prometheus.
//!
//! ```sh
//! QUORUM_LOCK_NODES=redis://127.0.0.1:6379 cargo run --example prometheus
//! curl -s http://127.0.0.1:9898/metrics | grep quorum_lock_
//! ```
//!
//! It runs a few lock cycles, prints the scrape once, and keeps serving for
//! `QL_SERVE_SECS` seconds (default 0).

use std::time::Duration;

use metrics_exporter_prometheus::PrometheusBuilder;
use quorum_lock::Redlock;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let nodes = std::env::var("QUORUM_LOCK_NODES")
        .map_err(|_| "set QUORUM_LOCK_NODES to comma-separated redis:// URLs")?;
    let (recorder, exporter) = PrometheusBuilder::new()
        .with_http_listener(([127, 0, 0, 1], 9898))
        .build()?;
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder)?;
    tokio::spawn(exporter);

    let redlock = Redlock::builder()
        .nodes(nodes.split(','))
        .default_ttl(Duration::from_secs(5))
        .build()?;
    for _ in 0..20 {
        let guard = redlock
            .lock("prometheus-demo", Duration::from_secs(5))
            .await?;
        guard.extend(Duration::from_secs(5)).await?;
        guard.release().await?;
    }
    println!("{}", handle.render());
    let serve: u64 = std::env::var("QL_SERVE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    tokio::time::sleep(Duration::from_secs(serve)).await;
    Ok(())
}
