"""runsc as ateom uses it, below the daemon and the doctor: `probe` (what a runsc
binary can do: flags, commands, nvproxy drivers) and `commands` (pure argv
builders under a thin runner)."""
