"""python -m andrea_edu.bench: see andrea_edu.bench.cli."""
import sys

from andrea_edu.bench.cli import main

sys.exit(main())
