"""Every committed example rendered once per test session, by the command its README gives
(tests/report/test_examples.py checks the render, test_claims.py what its report claims)."""

import subprocess
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import ROOT
from test_examples import EXAMPLES, readme_commands

#: Renders in flight at once: the one a test waits for and the next example's. Each is one
#: single-threaded process, so two keep a 2-core CI machine busy (the renders took 186 s one
#: after another, 2026-12-07).
RENDERS_AT_ONCE = 2


@dataclass(frozen=True)
class Render:
    argv: list[str]
    out: Path
    returncode: int
    stdout: str
    stderr: str


class ExampleRenders:
    """Renders an example on first use (its README's command, into a folder of its own), and
    starts the next example's beside it: the tests ask for them in ``EXAMPLES``' order."""

    def __init__(self, base: Path, pool: ThreadPoolExecutor):
        self.base, self.pool = base, pool
        self.started: dict[Path, Future] = {}

    def __call__(self, example: Path) -> Render:
        self._start(example)
        if example in EXAMPLES and example != EXAMPLES[-1]:
            self._start(EXAMPLES[EXAMPLES.index(example) + 1])
        return self.started[example].result()

    def _start(self, example: Path) -> None:
        if example not in self.started:
            self.started[example] = self.pool.submit(self._render, example)

    def _render(self, example: Path) -> Render:
        argv = readme_commands(example / "README.md")[0]
        out = self.base / str(example.relative_to(ROOT / "examples")).replace("/", "_")
        argv[argv.index("--out") + 1] = str(out)
        run = subprocess.run([sys.executable, *argv[1:]], cwd=ROOT, capture_output=True,
                             text=True, timeout=600)  # fmt: skip
        return Render(argv, out, run.returncode, run.stdout, run.stderr)


@pytest.fixture(scope="session")
def example_render(tmp_path_factory):
    with ThreadPoolExecutor(max_workers=RENDERS_AT_ONCE) as pool:
        yield ExampleRenders(tmp_path_factory.mktemp("examples"), pool)
