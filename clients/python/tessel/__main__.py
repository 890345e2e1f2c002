"""`python3 -m tessel ...` runs the command line (tessel/cli.py)."""
import sys

from .cli import main

sys.exit(main())
