"""`python -m rocpkg.cli`: the command line."""
from rocpkg.cli.main import entry

entry()
