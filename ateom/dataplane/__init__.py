"""The worker's data plane: every request to an actor, and every connection out
of one, goes through here.

A process of its own (``python -m ateom.dataplane``), started by the daemon as a
child and fed routes over a control stream, so a flood of requests never shares
a GIL or a thread pool with the node agent's API. Its modules, in reading order:

- `routes`: the table of actors (pure), looked up by Host and by address;
- `control`: the control stream's newline-delimited JSON (route, forget, ping,
  stats), applied in order;
- `counters`: what operators see, through the control stream's ``stats``;
- `tls`: contexts that follow the rotating credential and trust bundles, and
  the peer's SPIFFE id;
- `gate`: the front door of the TLS listeners: connection cap, handshake,
  identity;
- `wire`: h11 over asyncio streams, byte splices, resets, hop-by-hop headers;
- `upstream`: one request streamed to an actor's app and its answer back;
- `ingress`: HTTPS from Substrate's router, routed by Host, and the data
  plane's own answers (404, 503, 502, 504, ...);
- `tunnel`: CONNECT tunnels to an actor's ports;
- `egress`: actors' redirected outbound TCP, carried to their egress gateway
  by CONNECT over mutual TLS, or reset;
- `process`: flags, listeners, signals, exit status; `__main__` runs it.

It imports nothing of the daemon's (`ateom.daemon`); the daemon starts it.
"""
