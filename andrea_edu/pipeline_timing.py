"""`python -m andrea_edu.pipeline_timing` (kept so that the old command works): the code is in
andrea_edu.pipeline.timing."""
import sys

from andrea_edu.pipeline.timing import main

if __name__ == "__main__":
    sys.exit(main())
