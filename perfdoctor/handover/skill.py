"""`perfdoctor skill`: the agent skill shipped in the package (perfdoctor/SKILL.md)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from perfdoctor.errors import OutputUnwritable, UsageError

SKILL_FILE = "SKILL.md"
SKILL_NAME = "perfdoctor"


def skill_text() -> str:
    return resources.files("perfdoctor").joinpath(SKILL_FILE).read_text(encoding="utf-8")


def write_skill(skills_dir: Path) -> Path:
    """DIR/perfdoctor/SKILL.md: the layout agents read a skills folder in (one folder per
    skill, named as the skill)."""
    if skills_dir.exists() and not skills_dir.is_dir():
        raise UsageError(f"--write {skills_dir} is not a directory")
    target = skills_dir / SKILL_NAME / SKILL_FILE
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(skill_text(), encoding="utf-8")
    except OSError as err:
        raise OutputUnwritable(
            f"cannot write {target}: {err.strerror or err}",
            hint="give --write a directory you can write",
        ) from None
    return target
