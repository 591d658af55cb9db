"""The pacman templates (templates/pacman/*.j2) rendered through rocpkg's one Jinja2
environment setup (formats.render.make_environment), compiled once per process."""
from __future__ import annotations

import functools

import jinja2

from rocpkg.formats.render import make_environment


@functools.lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    return make_environment()


def render(name: str, **context) -> str:
    """templates/<name> rendered with context."""
    return _environment().get_template(name).render(**context)
