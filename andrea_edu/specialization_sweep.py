"""`python -m andrea_edu.specialization_sweep` (kept so that the old command works): the code is
in andrea_edu.heads.sweep."""
import sys

from andrea_edu.heads.sweep import main

if __name__ == "__main__":
    sys.exit(main())
