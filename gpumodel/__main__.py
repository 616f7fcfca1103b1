import sys

from gpumodel.cli import main

# guarded: a spawned fit worker (gpumodel.parallel) imports the parent's main module again
if __name__ == "__main__":
    sys.exit(main())
