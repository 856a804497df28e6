"""`python3 -m tests.fuzz`: see run.py."""
import sys

from .run import main

sys.exit(main())
