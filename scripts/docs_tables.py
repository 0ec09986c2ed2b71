#!/usr/bin/env python3
"""The tables of the docs that trainbench or a bench prints, kept as printed.

In docs/**/*.md, a block

    <!-- trainbench report raw/FILE.results.json [more files] -->
    ...
    <!-- end of trainbench output -->

holds what `trainbench report FILES --format markdown` prints from committed
results files (paths relative to the page), and a block opened by
`<!-- trainbench plugins NAME... -->` what `trainbench plugins --format
markdown NAME...` prints of those plugins (their option tables, from their
schemas), and a block opened by `<!-- bench raw/FILE.md -->` the table a
bench script wrote (bench/gpu_memory.sh's memory-TAG.md, bench/aba.py's
output), committed beside the page, as it wrote it. This rewrites every
block; with --check it changes nothing and fails, naming the page and
block, where one differs (the tests Docs.TablesAreWhatTrainbenchPrints,
Docs.ATableEditedByHandIsFound and Docs.ABenchTableEditedByHandIsFound).

    scripts/docs_tables.py PATH/TO/trainbench [--check] [--docs DIR] [--plugin-dir DIR]...

--docs: another folder of pages (default: this tree's docs/); --plugin-dir: a
folder `trainbench plugins` searches first (the cuda plugin's schema-only
stand-in, tests/fixtures/cuda_schema_plugin.cc, where LibTorch has no CUDA).
"""
import pathlib
import re
import shutil
import subprocess
import sys

BLOCK = re.compile(r"(<!-- (?:trainbench )?(report|plugins|bench) ([^>]*?) -->\n)(.*?)(<!-- end of (?:trainbench|bench) output -->)",
                   re.S)


def render(trainbench, folder, command, args, plugin_dirs):
    words = args.split()
    if command == "bench":
        if len(words) != 1 or not (folder / words[0]).is_file():
            sys.exit(f"{folder}: a bench block names '{args}', which is no file there: name one committed file")
        return (folder / words[0]).read_text()
    if command == "report":
        for f in words:
            if f.startswith("-") or not (folder / f).is_file():
                sys.exit(f"{folder}: a block names '{f}', which is no results file there: name committed files only")
        line = [trainbench, "report", *words, "--format", "markdown"]
    else:
        dirs = [arg for d in plugin_dirs for arg in ("--plugin-dir", d)]
        line = [trainbench, "plugins", *dirs, "--format", "markdown", *words]
    out = subprocess.run(line, cwd=folder, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"trainbench {command} {args}: exit {out.returncode}: {out.stderr.strip()}")
    return out.stdout


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    check = "--check" in sys.argv[2:]
    docs = sys.argv[sys.argv.index("--docs") + 1] if "--docs" in sys.argv[2:] else None
    plugin_dirs = [str(pathlib.Path(sys.argv[i + 1]).resolve()) for i, a in enumerate(sys.argv) if a == "--plugin-dir"]
    trainbench = str(pathlib.Path(shutil.which(sys.argv[1]) or sys.argv[1]).resolve())
    root = pathlib.Path(docs).resolve() if docs else pathlib.Path(__file__).resolve().parent.parent / "docs"
    stale = []
    for page in sorted(root.rglob("*.md")):
        text = page.read_text()

        def replace(m):
            body = render(trainbench, page.parent, m.group(2), m.group(3), plugin_dirs)
            if body != m.group(4):
                stale.append(f"{page}: the block {m.group(1).strip()}")
            return m.group(1) + body + m.group(5)

        new = BLOCK.sub(replace, text)
        if not check and new != text:
            page.write_text(new)
    if check and stale:
        print("stale tables (regenerate them with scripts/docs_tables.py build/bin/trainbench):")
        print("\n".join("  " + s for s in stale))
        sys.exit(1)


if __name__ == "__main__":
    main()
