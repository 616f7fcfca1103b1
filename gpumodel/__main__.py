import sys

from gpumodel.cli import main

sys.exit(main())
