"""What each of an actor's OCI bundles becomes, decided before anything is written.

Reading order: `devices` (which CDI devices a container gets, and the one
gVisor resolve step: where a GPU enters the sandbox), `catalog` (the specs
this daemon hands out), `edits` (pure config.json edits), `confine` (where a
bundle may point runsc), `plan` (the whole sandbox planned, injection
included), `store` (ateom's config.json in place while the sandbox runs).
"""
