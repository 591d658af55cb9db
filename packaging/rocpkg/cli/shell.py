"""`rocpkg completion bash|zsh` and `rocpkg man`: the shell completion script and the
manual page, generated from the command-line parser itself (cli.main.build_parser hands it to the
handlers as args.root_parser), so
that they never fall behind it: shtab writes the completion, argparse-manpage the
roff page. cli.main._register_commands calls register()."""
from __future__ import annotations

import sys

SHELLS = ("bash", "zsh")
# options that name a file or a directory complete as one
_FILE_OPTIONS = {"--config", "--keyring"}
_DIR_OPTIONS = {"--artifacts", "--output", "--gpg-home", "--install-prefix", "--sysfs", "--repo"}
_DIR_POSITIONALS = {"out", "src", "dst", "dest", "dir"}


def _mark_paths(parser) -> None:
    """Tell shtab which arguments are files and directories (it completes nothing else)."""
    import shtab

    for action in parser._actions:        # noqa: SLF001 - argparse has no public walk of its actions
        if getattr(action, "choices", None) and isinstance(action.choices, dict):   # the subcommands
            for sub in action.choices.values():
                _mark_paths(sub)
        elif set(action.option_strings) & _FILE_OPTIONS:
            action.complete = shtab.FILE
        elif set(action.option_strings) & _DIR_OPTIONS or (not action.option_strings
                                                          and action.dest in _DIR_POSITIONALS):
            action.complete = shtab.DIRECTORY


def completion_script(parser, shell: str) -> str:
    """The completion script of `rocpkg` (parser: cli.main.build_parser's) for this shell."""
    import shtab

    _mark_paths(parser)
    return shtab.complete(parser, shell=shell)


def man_page(parser) -> str:
    """rocpkg(1) in roff (parser: cli.main.build_parser's): every command with its options,
    and an EXAMPLES section of every command's examples (cli.examples)."""
    from argparse_manpage.manpage import Manpage

    import rocpkg
    from rocpkg.cli.examples import EXAMPLES

    page = Manpage(parser, _data={"project_name": "rocpkg", "version": rocpkg.__version__, "manual_section": 1,
                                  "manual_title": "rocpkg manual",
                                  "description": "native packages and repositories from GPU build artifacts"})
    lines = [line for examples in EXAMPLES.values() for line in examples]
    page.add_section("examples", "=", ".nf\n" + "\n".join(_roff(line) for line in lines) + "\n.fi")
    # a text line that help's wrapping starts with an apostrophe would read as a control line
    return "\n".join("\\&" + line if line.startswith("'") else line for line in str(page).split("\n"))


def _roff(text: str) -> str:
    """A line of literal text as roff reads it: backslashes doubled, hyphens as \\-."""
    return text.replace("\\", "\\\\").replace("-", "\\-")


def _cmd_completion(args) -> int:
    sys.stdout.write(completion_script(args.root_parser, args.shell))
    return 0


def _cmd_man(args) -> int:
    sys.stdout.write(man_page(args.root_parser))
    return 0


def register(sub) -> None:
    p = sub.add_parser("completion", help="print the shell completion script (bash or zsh)")
    p.add_argument("shell", choices=SHELLS, help="the shell to complete rocpkg in")
    p.set_defaults(func=_cmd_completion)

    p = sub.add_parser("man", help="print rocpkg's manual page (roff; `man -l -` reads it)")
    p.set_defaults(func=_cmd_man)
