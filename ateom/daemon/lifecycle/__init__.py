"""What ties the daemon's packages together: `config` (every `ateom serve` flag,
its environment twin and default), `readiness` (whether an actor can run now:
what SERVING means), `checkpoint` (a checkpoint's steps, in order: check, save,
commit or undo, release), `dataplane` (the data plane's child process and the
routes fed to it), `reach` (how an actor is reached: its network, its route,
its wakeup probes, step by step of the calls), `service` (`AteomService`, each
lifecycle call a short sequence over calls, bundles, sandbox, actors and gpus)
and `release` (an actor given back; after a checkpoint on a thread of its own,
the GPU hand-over)."""
