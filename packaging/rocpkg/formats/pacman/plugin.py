"""The Arch Linux format as the rest of rocpkg sees it (rocpkg.formats.plugin.Format).

Packages are always zstd-compressed `.pkg.tar.zst` (pacman's default; the file name says
the compression). package.json names system dependencies for Debian and RPM only, so a
pacman package carries its in-release relations and no system ones."""
from __future__ import annotations

import re

from rocpkg.errors import RocpkgInputError
from rocpkg.formats.plugin import Format
from rocpkg.formats.versions import Order
from rocpkg.formats.pacman import rules

SUFFIX = ".pkg.tar.zst"
SNIPPET = "rocm.pacman.conf"    # the pacman.conf section of the repository, at OUT's top


def _version(version: str, release: str) -> tuple[str, str]:
    return rules.pkgver(version), rules.pkgrel(release)


def _pin(name: str, evr: str) -> str:
    return rules.relation(f"{name} (= {evr})")


def _external(relation: str) -> str:
    return ""


def _arch(independent: bool, fields: dict, settings: dict) -> str:
    return rules.ANY if independent else rules.architecture(fields.get("Architecture") or settings["deb_arch"])


def file_name(spec) -> str:
    return rules.package_filename(spec.name, spec.version, spec.release, spec.arch, spec.epoch, "zstd")


def _pool(spec) -> str:
    return rules.DEFAULT_ARCH if spec.arch == rules.ANY else spec.arch


def _problem(check, text: str) -> str:
    try:
        check(text)
    except RocpkgInputError as exc:
        return "; ".join(what for _, what in exc.problems)
    return ""


def write_package(spec, out_dir, options):
    """write_pacman, zstd-compressed whatever the build's compression (the file name says zstd)."""
    from dataclasses import replace

    from rocpkg.formats.pacman.write import write_pacman

    return write_pacman(spec, out_dir, replace(options, compression="zstd"))


FORMAT = Format(
    name=rules.FORMAT, title="Arch Linux", suffix=SUFFIX, client="pacman", dialect="deb", metadata_suffix="PKGINFO",
    pin=_pin, external=_external, arch=_arch, file_name=file_name, pool=_pool, version=_version,
    writer="rocpkg.formats.pacman.plugin:write_package", reader="rocpkg.formats.pacman.reader:READER",
    name_rule=rules.NAME, arch_rule=re.compile(r"[a-z0-9_]+"),
    target_provides=lambda target: f"rocm-built-for-{target}",   # `pacman -S rocm-built-for-gfx1100`
    version_problem=lambda evr: _problem(rules.split_full_version, evr),
    relation_problem=lambda relation: _problem(rules.relation, relation),
    templates=("pacman/PKGINFO.j2", "pacman/BUILDINFO.j2", "pacman/INSTALL.j2"), default_build=False,
    order_tool="vercmp", compare=lambda a, b: Order(rules.vercmp(a, b)), install_command="pacman -S {}",
    repository="rocpkg.formats.pacman.repository:REPOSITORY", snippet=SNIPPET,
)
