"""The README documents every setting the service reads and every operator command."""

import re

from tests.platform.conftest import ROOT


def test_the_readme_configuration_table_lists_every_agp_setting():
    settings_source = (ROOT / "agp_project" / "settings" / "base.py").read_text()
    read = set(re.findall(r'env_(?:str|int|bool|list)\(\s*"(AGP_[A-Z0-9_]+)"', settings_source))
    readme = (ROOT / "README.md").read_text()
    documented = set(re.findall(r"`(AGP_[A-Z0-9_]+)`", readme))
    assert len(read) > 20
    missing = sorted(read - documented)
    assert missing == [], f"add these settings to the README's configuration table: {missing}"


def test_the_quick_start_is_two_commands():
    readme = (ROOT / "README.md").read_text()
    quick_start = readme.split("## Quick start", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    commands = [line.split("#")[0].strip() for line in quick_start.strip().splitlines()]
    assert commands == ["scripts/serve", "scripts/test"]
    assert all((ROOT / command).stat().st_mode & 0o111 for command in commands)


def test_the_readme_names_every_operator_command_of_the_project():
    commands = {path.stem for app in ("core", "auth_tokens", "registry", "decision", "execution", "auditing")
                for path in (ROOT / app / "management" / "commands").glob("*.py")
                if not path.stem.startswith("_")}
    table = (ROOT / "README.md").read_text().split("\n## Operator commands\n", 1)[1].split("\n## ", 1)[0]
    listed = {name for cell in re.findall(r"^\| (.+?) \|", table, re.M)
              for name in re.findall(r"`([a-z_]+)[ `]", cell)}
    assert len(commands) >= 14
    assert sorted(commands - listed) == [], "add these commands to the README's operator commands table"
    assert sorted(listed - commands) == [], "the README lists commands that do not exist"
