"""Provenance worded for a reader (andrea_edu/figures/provenance.py, bookdata.where_looked): every
committed record, formatted, carries no trace of the machine that made it, and still says what a
reader needs (the command as typed in the repository, date, device, versions, commit)."""
import json
from pathlib import Path

import pytest

from andrea_edu import env
from andrea_edu import data as bookdata
from andrea_edu.figures import provenance as P
from test_book import build_residue_in

DATA = Path(__file__).resolve().parents[1] / "book" / "data"


def _records():
    for path in sorted(DATA.glob("*.json")):
        obj = json.loads(path.read_text())
        prov = obj.get("provenance", obj) if isinstance(obj, dict) else {}
        yield path.name, prov


@pytest.mark.parametrize("name, prov", list(_records()), ids=lambda x: x if isinstance(x, str) else "")
def test_every_committed_record_reads_clean(name, prov):
    rows = P.rows(prov, name)
    text = " ".join(v for _, v in rows)
    assert not build_residue_in(text), (name, text)
    if "produced_by" in prov or "command" in prov:
        cmd = next(v for k, v in rows if k == "made by").strip("`")
        assert cmd.startswith(("python -m andrea_edu.", "python -m andrea_lab.")), cmd
        module = cmd.split()[2]
        assert P._module_exists(module), f"{name}: `python -m {module}` runs no command"


def test_the_formatters_on_planted_records():
    assert P.command("python -m andrea_edu.specialization_sweep --out /tmp/h3/sweep_new.json",
                     "specialization_sweep.json") == \
        "python -m andrea_lab.make_sweep --out book/data/specialization_sweep.json"
    assert P.command("python -m andrea_edu.x --out book/data/a.json") == \
        "python -m andrea_edu.x --out book/data/a.json"
    assert P.commit("0123456789abcdef0123-dirty (andrea_edu/x.py)") == \
        "0123456789 plus uncommitted edits"
    assert P.commit("0123456789abcdef") == "0123456789" and P.commit("unknown") == "unknown"
    for old, new in P.RENAMED.items():  # each rename ends at a module that runs as a command
        assert P._module_exists(new) or new in P.RENAMED, (old, new)
    assert P.command("python -m andrea_edu.bench layout --out /x/bench_layout_cpu.json",
                     "bench_layout_cpu.json") == \
        "python -m andrea_lab.bench layout --out book/data/bench_layout_cpu.json"
    assert not P._module_exists("andrea_edu.bench") and P._module_exists("andrea_lab.bench")


def test_where_looked_names_folders_by_rule(monkeypatch, tmp_path):
    monkeypatch.delenv(bookdata.DATA_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    line = bookdata.where_looked("x.json")
    assert str(tmp_path) not in line and str(Path(env.__file__).parents[1]) not in line
    assert "book/data/x.json in the repository" in line and "data/x.json in the working" in line
    assert not build_residue_in(line)
