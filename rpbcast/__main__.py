import sys

from rpbcast.cli import main

sys.exit(main())
