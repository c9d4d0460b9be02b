"""Every committed example rendered once per test session, by the command its README gives
(tests/report/test_examples.py checks the render, test_claims.py what its report claims)."""

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import ROOT
from test_examples import readme_commands


@dataclass(frozen=True)
class Render:
    argv: list[str]
    out: Path
    returncode: int
    stdout: str
    stderr: str


class ExampleRenders:
    """Renders an example on first use (its README's command, into a folder of its own)."""

    def __init__(self, base: Path):
        self.base = base
        self.done: dict[Path, Render] = {}

    def __call__(self, example: Path) -> Render:
        if example not in self.done:
            argv = readme_commands(example / "README.md")[0]
            out = self.base / str(example.relative_to(ROOT / "examples")).replace("/", "_")
            argv[argv.index("--out") + 1] = str(out)
            run = subprocess.run([sys.executable, *argv[1:]], cwd=ROOT, capture_output=True,
                                 text=True, timeout=600)  # fmt: skip
            self.done[example] = Render(argv, out, run.returncode, run.stdout, run.stderr)
        return self.done[example]


@pytest.fixture(scope="session")
def example_render(tmp_path_factory) -> ExampleRenders:
    return ExampleRenders(tmp_path_factory.mktemp("examples"))
