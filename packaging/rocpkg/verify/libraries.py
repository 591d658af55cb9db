"""missing-library: every DT_NEEDED soname of every shipped host ELF that a package of the
release provides is provided inside the package's own dependency closure. A soname no
package of the release ships is the system's (declared external, or filtered for RPM by
settings.rpm_requires_exclude): the release cannot be wrong about it. The mistake this
catches is a host package that links a release library (`librocsolver.so.0`) and depends on
no package shipping it: installed alone, its library fails to load."""
from __future__ import annotations

from rocpkg.verify.view import ReleaseView


def check_libraries(release: ReleaseView, closure) -> None:
    """Report missing-library problems into `release`; closure(name) -> (names, unresolved)."""
    providers: dict[str, set[str]] = {}
    for (package, _), (soname, _) in release.linkage.items():
        if soname:
            providers.setdefault(soname, set()).add(package)
    for (package, path), (_, needed) in sorted(release.linkage.items()):
        reach = set(closure(package)[0]) | {package}
        for library in needed:
            owners = providers.get(library)
            if owners and not owners & reach:
                release.problem("missing-library", package, path, "",
                                f"needs {library}, which {', '.join(sorted(owners))} ships, but {package} depends "
                                f"on none of them: installed without it, the library fails to load "
                                f"({library}: cannot open shared object file)")
