"""`python -m exporter.simulate`: the simulator's command line."""
import sys

from exporter.simulate.run import main

raise SystemExit(main(sys.argv[1:]))
