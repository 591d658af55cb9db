"""A build's workers load the writers of the formats it builds and no others, and the
writers load no library they do not write with (issue 15: a worker writes nothing until
its imports are done; python-debian took 0.06-0.09 s of that on the 16-core machine, 45 ms
here, email.utils 13 ms: the .deb writer checks its stanza and dates its changelog itself)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

PROBE = """
import json, sys
from rocpkg.builder.workers import Workers

def loaded():
    return {name: name in sys.modules for name in ("rocpkg.formats.deb.package", "debian.deb822", "rocpkg.formats.rpm.write", "jinja2",
                                                    "email.utils", "rocpkg.builder.packing", "rocpkg.builder.run",
                                                    "rocpkg.store.releases")}

with Workers(2, formats=FORMATS) as workers:
    print(json.dumps(workers.pool.submit(loaded).result()))
"""


# every worker: the task's module (rocpkg.builder.packing), not the parent's side of the build
# (rocpkg.builder.run and its release and index modules: 16 ms a worker before its first write)
_TASKS = {"rocpkg.builder.packing": True, "rocpkg.builder.run": False, "rocpkg.store.releases": False}


def _worker_modules(formats: list[str]) -> dict[str, bool]:
    done = subprocess.run([sys.executable, "-c", PROBE.replace("FORMATS", repr(formats))], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize("formats,expected", [
    (["rpm"], {"rocpkg.formats.deb.package": False, "debian.deb822": False, "rocpkg.formats.rpm.write": True, "jinja2": True, "email.utils": False, **_TASKS}),
    (["deb"], {"rocpkg.formats.deb.package": True, "debian.deb822": False, "rocpkg.formats.rpm.write": False, "jinja2": True, "email.utils": False, **_TASKS}),
    (["deb", "rpm"], {"rocpkg.formats.deb.package": True, "debian.deb822": False, "rocpkg.formats.rpm.write": True, "jinja2": True,
                      "email.utils": False, **_TASKS}),
])
def test_a_worker_loads_the_writers_of_the_formats_built(formats, expected):
    assert _worker_modules(formats) == expected
