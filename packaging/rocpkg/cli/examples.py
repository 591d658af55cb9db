"""The examples `rocpkg COMMAND --help` ends with (argparse epilogs), one place for all
commands; cli.main.build_parser hangs them on the parsers (add_examples)."""
from __future__ import annotations

import argparse

EXAMPLES = {
    "plan": ["rocpkg plan -c package.json -a artifacts/",
             "rocpkg plan -a artifacts/ --targets gfx942,gfx110X --json --no-files > plan.json"],
    "build": ["rocpkg build -c package.json -a artifacts/ -o /srv/rocm -j 16",
              "rocpkg build -a artifacts/ -o /srv/rocm --channel nightly --date 2026-12-01 --repo \\\n"
              "      --gpg-home ~/.gnupg --sign-key release@example.org --base-url https://repo.example.org/rocm",
              "rocpkg build -a artifacts/ -o out-2 --shard 2/8 --json > build-2.json"],
    "repo": ["rocpkg repo /srv/rocm --gpg-home ~/.gnupg --sign-key release@example.org \\\n"
             "      --base-url https://repo.example.org/rocm",
             "rocpkg repo /srv/rocm --json"],
    "verify": ["rocpkg verify /srv/rocm --keyring /srv/rocm/rocm.gpg",
               "rocpkg verify -c package.json -a artifacts/      # before building"],
    "prune": ["rocpkg prune /srv/rocm --keep 3 --dry-run",
              "rocpkg prune /srv/rocm --policy dev=30d,nightly=120d,prerelease=2y,release=all \\\n"
              "      --gpg-home ~/.gnupg --sign-key release@example.org"],
    "promote": ["rocpkg promote /srv/rocm-nightly /srv/rocm --release 7.1.0-1 \\\n"
                "      --gpg-home ~/.gnupg --sign-key release@example.org --base-url https://repo.example.org/rocm"],
    "export": ["rocpkg export /srv/rocm /srv/rocm-gfx110x rocm-gfx110x --gpg-home ~/.gnupg --sign-key release@example.org"],
    "publish": ["rocpkg publish /srv/rocm /var/www/rocm",
                "rocpkg publish /srv/rocm s3://bucket/rocm --endpoint-url https://s3.example.org --json"],
    "sample-artifacts": ["rocpkg sample-artifacts /tmp/artifacts --targets gfx942,gfx1100 --size-mb 4"],
    "detect": ["rocpkg detect", "rocpkg detect --repo /srv/rocm --json"],
    "demo": ["rocpkg demo /tmp/rocpkg-demo"],
    "ls": ["rocpkg ls /srv/rocm", "rocpkg ls /srv/rocm --json | jq -r '.releases[].id'"],
    "show": ["rocpkg show /srv/rocm rocm-gfx110x", "rocpkg show /srv/rocm amdrocm-blas=7.1.0-1 --files"],
    "diff": ["rocpkg diff /srv/rocm 7.1.0-1 7.1.0-2", "rocpkg diff /srv/rocm 7.1.0-1 7.1.0-2 --json"],
    "rm": ["rocpkg rm /srv/rocm 7.1.1~20261130-1 --dry-run",
           "rocpkg rm /srv/rocm 7.1.1~20261130-1 --gpg-home ~/.gnupg --sign-key release@example.org"],
    "completion": ["rocpkg completion bash > ~/.local/share/bash-completion/completions/rocpkg",
                   "rocpkg completion zsh > ~/.zfunc/_rocpkg"],
    "man": ["rocpkg man > rocpkg.1 && man -l rocpkg.1"],
}


def add_examples(commands: dict[str, argparse.ArgumentParser]) -> None:
    """Each command's examples as its epilog (kept as written: RawDescriptionHelpFormatter,
    which still wraps the options' help)."""
    for name, parser in commands.items():
        if name in EXAMPLES:
            parser.epilog = "examples:\n" + "\n".join(f"  {line}" for line in EXAMPLES[name])
            parser.formatter_class = argparse.RawDescriptionHelpFormatter
