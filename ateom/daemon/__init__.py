"""The ateom daemon: the node agent's gRPC calls, run as gVisor sandboxes over runsc.

Sub-packages by concern, each importing only those listed before it (the
import-graph test holds every package of ateom to a layering without cycles):

1. `calls`: one lifecycle call's vocabulary, before any side effect —
   `requests` (what the node agent asks, plain frozen data), `validation`
   (pure checks), `deadline` (how long the caller waits), `phases` (the timed
   steps every log line and metric goes through), `refusals` (requests turned
   down on purpose, as countable events), `sandbox_exits` (sandboxes that ended
   unasked, as countable events), `progress` (what a long phase is doing while
   it runs), `answer` (work that waits until the caller has its answer).
2. `bundles`: what each of an actor's OCI bundles becomes — `devices` (which
   CDI devices a container gets; **where a GPU enters the sandbox**: the one
   gVisor resolve step, `resolve_for_gvisor`), `catalog` (the CDI specs this
   daemon hands out, a generated one included), `edits` (pure config.json
   edits: CRI annotations, foreign hooks, the cuda-checkpoint mount),
   `confine` (where a bundle may point runsc), `plan` (the sandbox plan:
   every bundle decided, injection included, before anything is written),
   `store` (ateom's config.json in the bundles while the sandbox runs, the
   node agent's given back after).
3. `sandbox`: runsc's side of an actor — `boot` (create/start or restore, in
   order), `save` (runsc checkpoint, keep-or-terminate after a failed save),
   `teardown` (stop, delete, kill what is left), `state_dir` (remove the
   runsc state dir and what runsc mounted in it), `janitor` (bounded logs).
4. `actors`: the actors this daemon hosts — `table` (the state machine,
   `next_phase`, and the table), `succession` (the hand-over: a checkpointed
   actor's slot and GPUs to the actors after it, the protocol in one object),
   `starts` (the Run and Restore calls in
   flight, which a checkpointed actor's cleanup lets go first), `admission`
   (may a call start; the drain), `hosting` (a planned sandbox put up and
   taken down), `stats`, `sampling` (every actor's latest stats, taken in the
   background).
5. `gpus`: the GPU side of an actor's life — `lifecycle` (which GPUs at Run
   and Restore, what a checkpoint saves), `placement` (the Pod's GPUs booked per
   actor over `ateom.gpuinfo.placement`), `checkpoint_policy` (**where a GPU
   checkpoint is decided**: refused before the sandbox is touched, or the
   flags it needs), `compat_record` (the record written with a GPU image,
   checked first at restore, and the placement it implies).
6. `lifecycle`: what ties them — `config` (every `ateom serve` flag and its
   environment twin; the node's and GPU settings as `ateom.settings` values),
   `readiness` (whether an actor can run now: what SERVING means),
   `checkpoint` (a checkpoint's steps in order: check, save, commit or undo,
   release), `dataplane` (the data plane's child process, ingress and egress,
   and the routes fed to it), `reach` (how an actor is reached: its network,
   route and wakeup probes at each step of the calls),
   `service` (`AteomService`: each lifecycle call a short sequence over the
   packages above) and `release` (an actor given back; after a checkpoint on
   a thread of its own, where the GPU hand-over happens).
7. `rpc`: the gRPC surface — `wire` (protobuf <-> requests, pure),
   `handler` (the one place every RPC goes through: logging, error codes,
   observers), `server` (the thin servicer, health, reflection, TLS, drain),
   `inspection` (the operator's Inspect service: status, devices,
   PlanInjection, doctor), `metrics` (Prometheus, fed by the seams), `metrics_endpoint`
   (their HTTP endpoint), `readyz` (GET /readyz, what the kubelet's readiness probe
   asks a Substrate worker).

At the top: `cli` (`ateom serve`) and `logs` (structlog setup). Below the
daemon, and shared with `ateom doctor` and `ateom checkpoint-info`:
`ateom.runsc` (argv builders and the capability probe), `ateom.process`
(the reaper and the tool runner), `ateom.gpuinfo` (GPU facts, the pure
placer, restore compatibility, nvidia-ctk), `ateom.inject` (the CDI merge),
`ateom.settings`, and `ateom.worker` (the worker Pod as Substrate's controller
starts it: the base dir's layout, the capacity files, the --atunnel-* flags).
See docs/daemon.md.
"""
