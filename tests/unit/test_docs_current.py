"""The manual stays true: the inventory reference is what the model generates, every field is described,
secrets are marked as held by reference, the example inventories validate and hold no secret, and every
relative link of README.md and docs/ reaches a file (and a heading, where it names one)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from support.secret_seeds import seeded_secrets

from sbxcheck import docs_inventory
from sbxcheck.inventory import Inventory, load_inventory
from sbxcheck.plugin import docs_settings
from sbxcheck.plugin.settings import OPTIONS
from sbxcheck.secrets import find_secrets

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "inventory.md"
EXAMPLES = REPO / "examples" / "inventory"


def _all_fields() -> list[tuple[str, str, Any]]:
    """(table, field, FieldInfo) for every field a user can write, the top-level tables included."""
    rows = [("", name, info) for name, info in Inventory.model_fields.items() if not info.exclude]
    for section in docs_inventory.sections():
        rows += [(section.key, name, info) for name, info in section.model.model_fields.items()]
    return rows


def test_the_inventory_reference_is_what_the_model_generates() -> None:
    committed = PAGE.read_text(encoding="utf-8") if PAGE.exists() else ""
    assert docs_inventory.render() == committed, (
        f"docs/inventory.md is out of date with sbxcheck/inventory.py: run `{docs_inventory.COMMAND}`"
    )


def test_the_settings_reference_is_what_the_options_table_generates() -> None:
    page = REPO / "docs" / "settings.md"
    committed = page.read_text(encoding="utf-8") if page.exists() else ""
    assert docs_settings.render() == committed, (
        f"docs/settings.md is out of date with OPTIONS in sbxcheck/plugin/settings.py: run `{docs_settings.COMMAND}`"
    )
    for option in OPTIONS:
        assert f"| `{option.name}` |" in committed
        for written in (option.flag, option.env, option.ini):
            assert written is None or f"`{written}" in committed, f"{written} is not on docs/settings.md"


def test_every_table_and_field_is_in_the_reference() -> None:
    page = PAGE.read_text(encoding="utf-8")
    for section in docs_inventory.sections():
        assert f"`{section.header}`" in page
    for table, name, _ in _all_fields():
        if table:
            assert f"| `{name}` |" in page, f"{table}.{name} is missing from docs/inventory.md"


@pytest.mark.parametrize("generator", [docs_inventory, docs_settings], ids=["inventory", "settings"])
def test_placeholders_show_as_text_not_as_html_tags(generator: Any) -> None:
    """A ``<id>`` outside a code span would be taken for an HTML tag and vanish from the rendered page."""
    for line in generator.render().splitlines():
        if line.startswith("<!--"):
            continue
        outside_code = line.split("`")[::2]
        assert not any(re.search(r"<[A-Za-z]", part) for part in outside_code), line


def test_every_field_says_what_it_is_for() -> None:
    undescribed = [f"{table}.{name}".lstrip(".") for table, name, info in _all_fields() if not info.description]
    assert not undescribed, "fields without Field(description=...): " + ", ".join(undescribed)


def test_every_secret_reference_is_marked_as_one() -> None:
    """An ``*_env`` field (and env_from) names a variable; a ``*_file`` path holds a secret: both marked."""
    wrong = []
    for table, name, info in _all_fields():
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        kind = extra.get("secret")
        if name.endswith("_env") or name == "env_from":
            expected: str | None = "env"
        elif name.endswith("_file") and "Path" in str(info.annotation):
            expected = "file"
        else:
            continue
        if kind != expected:
            wrong.append(f"{table}.{name} (marked {kind!r}, expected {expected!r})")
    assert not wrong, "secret references not marked: " + ", ".join(wrong)
    page = PAGE.read_text(encoding="utf-8")
    for line in page.splitlines():
        if line.startswith(("| `token_env`", "| `password_file`", "| `provisioning_key_env`")):
            assert "**secret, by reference**" in line, line


def _example(name: str) -> dict[str, Any]:
    with (EXAMPLES / f"{name}.toml").open("rb") as handle:
        return tomllib.load(handle)


@pytest.mark.parametrize(
    ("name", "sections"), [("gate", ("ssh", "sssf", "state")), ("canary", ("ssh", "sandboxed", "dgx"))]
)
def test_the_example_inventories_validate_against_the_model(name: str, sections: tuple[str, ...]) -> None:
    inventory = Inventory.model_validate(_example(name))
    assert inventory.sim is None
    for section in sections:
        model = getattr(inventory, section)
        assert isinstance(model, BaseModel), f"examples/inventory/{name}.toml has no [{section}]"
        assert model.model_fields_set, f"examples/inventory/{name}.toml: [{section}] sets nothing"


@pytest.mark.parametrize("name", ["gate", "canary"])
def test_the_example_inventories_load_as_a_run_reads_them(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the files they name in place (under a fresh HOME), each example loads with no problem."""
    monkeypatch.setenv("HOME", str(tmp_path))
    for needed in (".ssh/config", ".ssh/known_hosts", "src/inkwell/adws/adw_sssf_config/sssf.config.yaml"):
        (tmp_path / needed).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / needed).write_text("", encoding="utf-8")
    inventory = load_inventory(EXAMPLES / f"{name}.toml")
    assert inventory.ssh.config == tmp_path / ".ssh" / "config"


def test_the_canary_example_exercises_routes_canaries_and_the_mcp() -> None:
    sandboxed = Inventory.model_validate(_example("canary")).sandboxed
    assert sandboxed is not None
    assert {r.via for r in sandboxed.routes} == {"rest", "mcp"} and sandboxed.mcp is not None
    assert sandboxed.canaries and sandboxed.github_probes and sandboxed.workspaces
    assert any(r.contract != "none" for r in sandboxed.routes)
    assert sandboxed.token_env or sandboxed.password_env or sandboxed.password_file


@pytest.mark.parametrize("name", ["gate", "canary"])
def test_the_example_inventories_hold_no_secret(name: str) -> None:
    text = (EXAMPLES / f"{name}.toml").read_text(encoding="utf-8")
    assert find_secrets(text) == []
    seeded = text.replace('"SANDBOXED_DASHBOARD_PASSWORD"', f'"{seeded_secrets()["openrouter-key"]}"')
    seeded = seeded.replace('"OPENROUTER_PROVISIONING_KEY"', f'"{seeded_secrets()["openrouter-key"]}"')
    assert seeded != text and find_secrets(seeded), "the scan would not see a pasted key"


_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces as hyphens."""
    out = set()
    for line in markdown.splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            out.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return out


def _markdown_files() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


@pytest.mark.parametrize("page", _markdown_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_reaches_its_file_and_heading(page: Path) -> None:
    broken = []
    for target in _LINK.findall(page.read_text(encoding="utf-8")):
        if re.match(r"^[a-z]+:", target):
            continue
        path_part, _, anchor = target.partition("#")
        resolved = (page.parent / path_part).resolve() if path_part else page
        if not resolved.exists():
            broken.append(f"{target} (no {resolved.relative_to(REPO) if resolved.is_relative_to(REPO) else resolved})")
        elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved.read_text(encoding="utf-8")):
            broken.append(f"{target} (no heading #{anchor})")
    assert not broken, f"{page.relative_to(REPO)}: broken links: " + ", ".join(broken)


def test_the_readme_stays_short_and_starts_with_the_two_quick_start_commands() -> None:
    """The topics live in docs/; the quick start's first block is what CI runs (.ci/fresh-env.sh, .ci/run)."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 150, "README.md grew past 150 lines: give the topic a page in docs/"
    quick = readme.split("## Quick start", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0].splitlines()
    assert [line.split("#")[0].strip() for line in quick] == [
        "pip install -e '.[sim]' && pytest -m gate",
        "pip install -e '.[test]' && pytest tests -n 4 --dist worksteal",
    ]


def test_the_readme_links_every_docs_page() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    missing = [p.name for p in sorted((REPO / "docs").glob("*.md")) if f"(docs/{p.name})" not in readme]
    assert not missing, "docs pages the README's contents do not link: " + ", ".join(missing)


@pytest.mark.parametrize("generator", [docs_inventory, docs_settings], ids=["inventory", "settings"])
def test_each_generator_writes_its_page_and_refuses_options(
    generator: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "page.md"
    assert generator.main([str(out)]) == 0
    assert out.read_text(encoding="utf-8") == generator.render()
    assert generator.main(["--check"]) == 2
    assert f"usage: {generator.COMMAND.rsplit(' ', 1)[0]} [OUT.md]" in capsys.readouterr().err
