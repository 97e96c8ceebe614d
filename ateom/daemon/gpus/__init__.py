"""The GPU side of an actor's life.

`lifecycle` (`GpuActors`: which GPUs at Run and Restore, what a checkpoint
saves), `placement` (the Pod's GPUs booked per actor over the pure placer in
`ateom.gpuinfo.placement`), `checkpoint_policy` (where a GPU checkpoint is
decided: refused before the sandbox is touched, or the flags it needs),
`compat_record` (the record written with a GPU image, checked first at
restore, and the placement it implies).
"""
