"""A build's workers load the writers of the formats it builds and no others (issue 15: a
worker writes nothing until its imports are done; python-debian and the .deb writer took
0.07-0.09 s of that on the 16-core machine, for an .rpm build that never uses them)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

PROBE = """
import json, sys
from rocpkg.workers import Workers

def loaded():
    return {name: name in sys.modules for name in ("rocpkg.deb", "debian.deb822", "rocpkg.rpm", "jinja2")}

with Workers(2, hold=False, formats=FORMATS) as workers:
    print(json.dumps(workers.pool.apply(loaded)))
"""


def _worker_modules(formats: list[str]) -> dict[str, bool]:
    done = subprocess.run([sys.executable, "-c", PROBE.replace("FORMATS", repr(formats))], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize("formats,expected", [
    (["rpm"], {"rocpkg.deb": False, "debian.deb822": False, "rocpkg.rpm": True, "jinja2": True}),
    (["deb"], {"rocpkg.deb": True, "debian.deb822": True, "rocpkg.rpm": False, "jinja2": True}),
    (["deb", "rpm"], {"rocpkg.deb": True, "debian.deb822": True, "rocpkg.rpm": True, "jinja2": True}),
])
def test_a_worker_loads_the_writers_of_the_formats_built(formats, expected):
    assert _worker_modules(formats) == expected
