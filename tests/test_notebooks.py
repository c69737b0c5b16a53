"""Run every notebooks/*.ipynb top to bottom (no Jupyter) and keep them stripped.

Each notebook's code cells run in order in one fresh namespace, with
matplotlib on the non-interactive Agg backend. A failing cell is reported
with its index and source.
"""

from __future__ import annotations

import json
import traceback
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

import offload_pass  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def test_notebooks_found():
    assert NOTEBOOKS, f"no notebooks under {NOTEBOOK_DIR}"


def test_offload_pass_is_this_checkout():
    # An editable install elsewhere must not be what the notebooks exercise.
    assert Path(offload_pass.__file__).resolve().is_relative_to(ROOT), offload_pass.__file__


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(path: Path):
    torch._dynamo.reset()
    cells = [c for c in _load(path)["cells"] if c["cell_type"] == "code"]
    namespace: dict = {"__name__": "__main__"}
    try:
        for index, cell in enumerate(cells):
            source = _source(cell)
            try:
                code = compile(source, f"<{path.name} code cell {index}>", "exec")
                exec(code, namespace)
            except Exception:
                pytest.fail(
                    f"{path.name}: code cell {index} failed\n"
                    f"--- source ---\n{source}\n--- error ---\n{traceback.format_exc()}",
                    pytrace=False,
                )
    finally:
        plt.close("all")
        torch._dynamo.reset()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_is_stripped(path: Path):
    """Outputs are stripped before commit: no outputs, null execution counts."""
    nb = _load(path)
    assert nb.get("nbformat") == 4, f"{path.name}: nbformat {nb.get('nbformat')!r}, expected 4"
    assert nb.get("metadata", {}).get("kernelspec", {}).get("name") == "python3", path.name
    for index, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        assert cell.get("outputs") == [], f"{path.name}: cell {index} has outputs"
        assert cell.get("execution_count") is None, f"{path.name}: cell {index} has an execution count"
