"""Read compute-sanitizer's text reports: what each tool found in which kernel, API errors apart.

    python scripts/gpu_sanitizer_report.py TOOL REPORT...   one JSON line per report
    python scripts/gpu_sanitizer_report.py --verdict DIR    the suite's sanitizer step: DIR
        holds <tool>_<version>.log and .rc (exit status) per process; prints one line per
        tool (kernel, count, first finding) and exits 0 all clean, 1 a finding or a failed
        case, 3 a tool refused, timed out, left no report or a report that is not
        compute-sanitizer's (nothing found otherwise), 2 DIR is not a folder

compute-sanitizer prints every line of its own with the prefix '========= '. A finding starts
with an unindented message after the prefix ("Invalid __global__ read of size 4 bytes",
"Error: Race reported between Write access ...", "Uninitialized __global__ memory read ...",
"Barrier error detected ..."), and its indented lines that follow name where it happened
("at attention_v3_flash<...>(...)+0x1f0 in attention_v3_flash.cu:210", "by thread (3,0,0) in
block (0,1,0)"). Lines that are not findings: the banner ("COMPUTE-SANITIZER"), the totals
("ERROR SUMMARY: 3 errors", "RACECHECK SUMMARY: ..."), the tool's notes ("Target application
returned an error"), and a CUDA API call that returned an error to the host ("Program hit
cudaErrorInvalidValue (error 1) due to ... on CUDA API call to ..."): the suite runs with
--report-api-errors no, and any such line left is counted apart (api_errors), never as a
kernel finding: libraries return API errors in normal operation. Standard library only.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

PREFIX = "========="
NOT_FINDINGS = re.compile(
    r"^(COMPUTE-SANITIZER|ERROR SUMMARY|\w+ SUMMARY|LEAK SUMMARY|Target application returned|"
    r"Error: process didn't terminate successfully|Program hit |Saved host backtrace|"
    r"The application may have hit an error|No (errors|hazards) |Internal Sanitizer Error|"
    r"Note:|Warning: )")
KERNEL = re.compile(r"\b(?:at|in)\s+(?:0x[0-9a-f]+\s+in\s+(?:\S+:\d+:)?)?"
                    r"((?:void\s+)?[A-Za-z_][\w:]*(?:<[^>]*>)?)(?:\(|\+0x)")


def _kernel_of(lines: list[str]) -> str | None:
    ours = next((m.group(0) for ln in lines for m in [re.search(r"attention_v\w+", ln)] if m),
                None)
    if ours:
        return ours
    for ln in lines:
        m = KERNEL.search(ln)
        if m:
            return m.group(1).replace("void ", "")
    return None


def parse(text: str, tool: str) -> dict:
    """{tool, findings, by_kernel: {kernel: count}, first: the first finding's message and
    place, api_errors: API errors returned to the host (not counted), summary: the tool's own
    total line, or None}."""
    blocks: list[list[str]] = []
    api_errors = 0
    summary = None
    cur: list[str] | None = None
    for raw in text.splitlines():
        if not raw.startswith(PREFIX):
            cur = None
            continue
        body = raw[len(PREFIX):]
        msg = body.strip()
        if not msg:
            cur = None
            continue
        indented = body.startswith("  ") or body.startswith("\t")
        if not indented:
            if msg.startswith("Program hit "):
                api_errors += 1
                cur = None
            elif re.match(r"(ERROR|\w+) SUMMARY", msg):
                summary = msg
                cur = None
            elif NOT_FINDINGS.match(msg):
                cur = None
            else:
                cur = [msg]
                blocks.append(cur)
        elif cur is not None:
            cur.append(msg)
    by_kernel: dict[str, int] = {}
    for b in blocks:
        k = _kernel_of(b) or "(kernel not named)"
        by_kernel[k] = by_kernel.get(k, 0) + 1
    first = None
    if blocks:
        b = blocks[0]
        where = next((ln for ln in b[1:] if ln.startswith("at ")), "")
        first = (b[0] + (f" ({where})" if where else ""))[:300]
    # a report is compute-sanitizer's when its banner or its total line is there: a file
    # without either (empty, junk, another program's log) is no evidence of a clean run
    recognized = summary is not None or any(
        raw.startswith(PREFIX) and "COMPUTE-SANITIZER" in raw for raw in text.splitlines())
    return dict(tool=tool, findings=len(blocks) if recognized else None, by_kernel=by_kernel,
                first=first, api_errors=api_errors, summary=summary, recognized=recognized)


def line(r: dict) -> str:
    """One summary line: 'memcheck: clean' or 'racecheck: 2 findings (attention_v2_wmma x2);
    first: ...'."""
    api = f"; {r['api_errors']} API error(s) returned to the host, not counted" \
        if r.get("api_errors") else ""
    if r.get("recognized") is False:
        return f"{r['tool']}: not a compute-sanitizer report (no banner, no summary line)"
    if not r["findings"]:
        return f"{r['tool']}: clean{api}"
    ks = ", ".join(f"{k} x{n}" for k, n in r["by_kernel"].items())
    return f"{r['tool']}: {r['findings']} finding(s) ({ks}); first: {r['first']}{api}"


def verdict(folder: Path) -> tuple[int, str]:
    """(exit status, one line) of the sanitizer step from folder's <tool>_<version>.log/.rc."""
    failed = refused = False
    parts = []
    for tool in ("memcheck", "racecheck", "synccheck", "initcheck"):
        found: dict = dict(tool=tool, findings=0, by_kernel={}, first=None, api_errors=0)
        notes = []
        logs = sorted(folder.glob(f"{tool}_v*.log"))
        if not logs:   # nothing ran (no kernel version listed, say): never "clean"
            parts.append(f"{tool}: no report (no {tool}_v*.log: nothing ran)")
            refused = True
            continue
        for log in logs:
            ver = log.stem.split("_")[-1]
            try:
                rc = int((log.with_suffix(".rc")).read_text().strip())
            except (OSError, ValueError):
                rc = None
            text = log.read_text(errors="replace")
            r = parse(text, tool)
            if not r["recognized"]:
                if rc in (0, 9, None):   # says clean (or errors), but shows nothing: no evidence
                    notes.append(f"{ver}: not a compute-sanitizer report (status {rc}; see "
                                 f"its log)")
                    refused = True
                    continue
                r["findings"] = 0   # the tool did not run: the status below says why
            found["findings"] += r["findings"]
            found["api_errors"] += r["api_errors"]
            for k, n in r["by_kernel"].items():
                found["by_kernel"][k] = found["by_kernel"].get(k, 0) + n
            found["first"] = found["first"] or (f"{ver}: {r['first']}" if r["first"] else None)
            if rc == 0 or (rc == 9 and r["findings"]):
                failed = failed or bool(r["findings"])
                continue
            if rc == 9:   # the tool says errors, the parser found none: look, do not trust
                notes.append(f"{ver}: exit 9 but no finding parsed (see its log)")
                failed = True
            elif rc == 1:
                bad = next((ln for ln in text.splitlines() if ln.startswith("FAIL")), "")
                notes.append(f"{ver}: a kernel case failed under the tool ({bad[:100]})")
                failed = True
            elif rc in (124, 137):
                notes.append(f"{ver}: timed out")
                refused = True
            else:
                first_line = next((ln for ln in text.splitlines() if ln.strip()), "")[:100]
                notes.append(f"{ver}: refused or could not run, status {rc} ({first_line})")
                refused = True
        parts.append(line(found) + (f" [{'; '.join(notes)}]" if notes else ""))
    return (1 if failed else 3 if refused else 0), "; ".join(parts)


def main(argv: list[str]) -> int:
    if argv[:1] == ["--verdict"] and len(argv) == 2:
        if not Path(argv[1]).is_dir():
            print(f"gpu_sanitizer_report: --verdict {argv[1]!r} is not a folder (give the "
                  f"folder of <tool>_<version>.log/.rc files)", file=sys.stderr)
            return 2
        status, text = verdict(Path(argv[1]))
        print(text)
        return status
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    tool = argv[0]
    for p in argv[1:]:
        try:
            text = Path(p).read_text(errors="replace")
        except OSError as e:
            print(json.dumps(dict(tool=tool, file=p, error=str(e))))
            continue
        print(json.dumps(dict(parse(text, tool), file=p)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
