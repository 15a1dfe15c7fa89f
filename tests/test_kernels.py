"""The compiled kernels' cache (kvlab/util/kernels.py): found by reading the source, judged fresh as numba judges it
(by the source's content, not its folder or file time), and carried into a copy."""

import shutil

from conftest import KVLAB

from kvlab.util import kernels


def test_every_njit_kernel_is_found():
    found = kernels.kernels()
    names = {(path.name, name) for path, name, _ in found}
    assert {("dense.py", "_intern"), ("scan.py", "_scan"), ("lru_kernel.py", "serve")} <= names
    assert ("scan.py", "_integer") not in names  # inlined: part of its callers
    for path, name, line in found:
        lines = path.read_text(encoding="utf-8").splitlines()
        header = lines[line - 1 : next(i for i in range(line - 1, len(lines)) if lines[i].startswith("def ")) + 1]
        assert lines[line - 1].startswith("@") and header[-1].startswith(f"def {name}(")  # numba's first line
        assert any(text.startswith("@njit(cache=True") for text in header)


def test_a_copy_takes_the_cache_along_and_an_edit_makes_it_stale(tmp_path):
    """numba's cache is keyed on a kernel's source file, not on another file's edit."""
    assert kernels.compiled()  # the suite's controller warmed them
    copy = tmp_path / "kvlab"
    shutil.copytree(KVLAB, copy, ignore=shutil.ignore_patterns("__pycache__"))  # new file times, no cache
    assert not kernels.compiled(copy)
    kernels.copy_cache(KVLAB, copy)
    assert kernels.compiled(copy)  # the same content: numba would load it
    edited = copy / "cli" / "plots.py"  # no kernel in it
    edited.write_text(edited.read_text(encoding="utf-8") + "\n# edited\n", encoding="utf-8")
    assert kernels.compiled(copy)
    edited = copy / "workloads" / "dense.py"
    edited.write_text(edited.read_text(encoding="utf-8") + "\n# edited\n", encoding="utf-8")
    assert not kernels.compiled(copy)
