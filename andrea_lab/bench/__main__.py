"""python -m andrea_lab.bench: see andrea_lab.bench.cli. Timings are measured at this CPU's own
speed: a process whose torch was loaded with the instruction-set pins runs itself again unpinned
(andrea_lab.process.rerun_unpinned); the provenance records the settings."""
import sys

from andrea_lab.bench.cli import main
from andrea_lab.process import rerun_unpinned

rc = rerun_unpinned("andrea_lab.bench")
sys.exit(main() if rc is None else rc)
