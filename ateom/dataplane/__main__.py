"""``python -m ateom.dataplane``: the data plane process (`ateom.dataplane.process`)."""

from __future__ import annotations

import sys

from ateom.dataplane.process import main

if __name__ == "__main__":
    sys.exit(main())
