"""The daemon's gRPC surface: `wire` (protobuf <-> plain requests), `handler` (every
RPC's logging, error codes and observers), `server` (servicer, health, TLS,
drain), `inspection` (the operator's Inspect service), `metrics` (the Prometheus
figures), `metrics_endpoint` (serving them on --metrics-listen) and `readyz` (the
worker's HTTP readiness, GET /readyz on --readiness-listen-address)."""
