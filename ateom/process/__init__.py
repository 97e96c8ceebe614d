"""Child processes, at the base of ateom: `reaper` (spawn, wait and reap every
child; ateom may be PID 1), `runner` (a tool run with a time limit, the one
contract the doctor and the GPU gatherers take), `exits` (waiting, woken by
the kernel, for processes that are not ours to exit) and `proc_io` (what a process
has read so far)."""
