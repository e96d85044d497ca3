"""The README fits on a screen and its ruleset says why it refuses; the docs list every setting the
service reads and every operator command."""

import re

from agp_project.canonical import bytes_hash
from core import engine
from tests.platform.conftest import ROOT

README = (ROOT / "README.md").read_text()


def test_the_readme_is_at_most_two_hundred_lines():
    assert len(README.splitlines()) <= 200


def test_the_readme_ruleset_gives_its_reason_when_it_refuses():
    [ruleset] = re.findall(r'RULESET = """(.*?)"""', README, re.S)
    refused = engine.evaluate(ruleset=ruleset, ruleset_hash=bytes_hash(ruleset.encode()), input={
        "action": {"tool_id": "crm", "operation": "delete_customer", "parameters": {}}, "task": {"risk_level": "low"}})
    assert (refused.allow, refused.reasons) == (False, ("only e-mail changes are allowed",))


def test_the_configuration_table_lists_every_agp_setting():
    settings_source = (ROOT / "agp_project" / "settings" / "base.py").read_text()
    read = set(re.findall(r'env_(?:str|int|bool|list)\(\s*"(AGP_[A-Z0-9_]+)"', settings_source))
    documented = set(re.findall(r"`(AGP_[A-Z0-9_]+)`", (ROOT / "docs" / "configuration.md").read_text()))
    assert len(read) > 20
    missing = sorted(read - documented)
    assert missing == [], f"add these settings to docs/configuration.md: {missing}"


def test_the_quick_start_is_two_commands():
    quick_start = README.split("## Quick start", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    commands = [line.split("#")[0].strip() for line in quick_start.strip().splitlines()]
    assert commands == ["scripts/serve", "scripts/test"]
    assert all((ROOT / command).stat().st_mode & 0o111 for command in commands)


def test_the_operations_guide_names_every_operator_command_of_the_project():
    commands = {path.stem for app in ("core", "auth_tokens", "registry", "decision", "execution", "auditing")
                for path in (ROOT / app / "management" / "commands").glob("*.py")
                if not path.stem.startswith("_")}
    table = (ROOT / "docs" / "operations.md").read_text().split("\n## Operator commands\n", 1)[1].split("\n## ", 1)[0]
    listed = {name for cell in re.findall(r"^\| (.+?) \|", table, re.M)
              for name in re.findall(r"`([a-z_]+)[ `]", cell)}
    assert len(commands) >= 14
    assert sorted(commands - listed) == [], "add these commands to docs/operations.md's operator commands"
    assert sorted(listed - commands) == [], "docs/operations.md lists commands that do not exist"


def test_every_relative_link_of_the_docs_names_a_file_of_the_repository():
    documents = [ROOT / "README.md", ROOT / "DEVELOPERS.md", *(ROOT / "docs").rglob("*.md")]
    broken = [f"{document.relative_to(ROOT)}: {target}" for document in documents
              for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", document.read_text())
              if not target.startswith(("http:", "https:", "mailto:")) and not (document.parent / target).exists()]
    assert broken == []
