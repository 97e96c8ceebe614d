"""runsc's side of one actor's sandbox: `boot` (containers in order), `save` (runsc
checkpoint), `teardown` (stop, delete, nothing left), `state_dir` (the runsc
state dir removed with its mounts), `janitor` (bounded logs)."""
