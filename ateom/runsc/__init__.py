"""runsc as ateom uses it, below the daemon and the doctor: `probe` (what a runsc
binary can do: flags, commands, nvproxy drivers), `commands` (pure argv
builders under a thin runner) and `host` (what runsc needs of the host: the
cgroup mounts)."""
