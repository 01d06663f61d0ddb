"""`python -m andrea_edu.gpucheck` (kept so that the old command works): the code is in
andrea_edu.bench.gpucheck; `python -m andrea_edu.bench gpu-check` runs the same."""
import sys

from andrea_edu.bench.gpucheck import main

if __name__ == "__main__":
    sys.exit(main())
