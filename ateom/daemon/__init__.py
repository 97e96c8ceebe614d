"""The ateom daemon: gRPC lifecycle of actors over runsc.

Read in this order: `requests` (what the node agent asks, as plain data),
`validation` (pure checks before any side effect), `bundles` (pure edits of
an OCI config: CRI sandbox annotations, foreign `dev.gvisor.*` annotations and
hooks), `devices` (which CDI devices each container gets and whether gVisor
can proxy them), `gpu` (presence, nvidia-ctk), `runsc_probe` + `runsc` (what
a runsc can do; argv building, pure; running, shell), `reaper` (every child
process), `actors` (the per-actor state machine and the hosting table),
`service` (the lifecycle, imperative shell), `wire` + `server` + `inspect`
(the thin gRPC layer; `rpc` and `phases` are the logging/metrics seams).
See docs/daemon.md.
"""
