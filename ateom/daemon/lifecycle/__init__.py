"""What ties the daemon's packages together: `config` (every `ateom serve` flag,
its environment twin and default) and `service` (`AteomService`, each lifecycle
call a short sequence over calls, bundles, sandbox, actors and gpus)."""
