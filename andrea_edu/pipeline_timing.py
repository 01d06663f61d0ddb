"""`python -m andrea_edu.pipeline_timing` (kept so that the old command works): the code is in
andrea_edu.pipeline.timing."""
import sys

from andrea_edu.pipeline.timing import main

if __name__ == "__main__":
    from andrea_edu.env import rerun_unpinned  # timings unpinned: at this CPU's own speed
    rc = rerun_unpinned("andrea_edu.pipeline_timing")
    sys.exit(main() if rc is None else rc)
