import sys

from rpbcast.tools.cli import main

sys.exit(main())
