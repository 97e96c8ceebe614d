import sys

from ateom.cli import main

sys.exit(main())
