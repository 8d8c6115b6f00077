"""How much of ComfyUI's published workflow templates Nodeloom's importer takes, weighted by usage.

Lives here: `main` (a script). Imports `nodes` and the `comfyui_workflow_templates_json` package (PyPI:
`comfyui-workflow-templates-json`, the templates as UI-format JSON plus `index.json` with a `usage` count
per template). Nothing is downloaded or run; each open-weight template (a name not starting `api_`) is
imported with our importer and counted as "imports clean" when no node of it is unsupported.

    python benchmarks/comfy_templates.py [--top 25] [--families] [--what-if]

Prints the share of templates and of usage that import clean (and of those, the usage whose model families
all run here, and the usage that `app check` then passes apart from missing model files), the unsupported ComfyUI node types weighted
by the usage of the templates they appear in, and (with --families) the usage per model family that
`app check` reports as one Nodeloom cannot run.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from importlib import resources
from pathlib import Path
from typing import Any

from nodes.comfy.sources import ComfyFormatError, check_comfy, import_comfy_data
from nodes.registry import default_registry


def templates_folder() -> Path:
    try:
        return Path(str(resources.files("comfyui_workflow_templates_json") / "templates"))
    except ModuleNotFoundError:
        raise SystemExit(
            "the templates package is not installed: pip install comfyui-workflow-templates-json"
        ) from None


def open_weight_usage(folder: Path) -> dict[str, int]:
    """Template name -> usage, for every template that is not an API (closed-model) workflow."""
    usage: dict[str, int] = {}
    for category in json.loads((folder / "index.json").read_text(encoding="utf-8")):
        for template in category.get("templates", []):
            name = template.get("name", "")
            if name and not name.startswith("api_") and (folder / f"{name}.json").is_file():
                usage[name] = max(usage.get(name, 0), int(template.get("usage") or 0))
    return usage


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--top", type=int, default=25, help="how many unsupported node types to list")
    p.add_argument("--families", action="store_true", help="also list families Nodeloom cannot run")
    p.add_argument(
        "--what-if",
        action="store_true",
        help="also list, per set of node types, the usage that mapping exactly that set would add",
    )
    args = p.parse_args(argv)
    folder = templates_folder()
    usage = open_weight_usage(folder)
    registry = default_registry(entry_point_packs=False)
    total = sum(usage.values()) or 1
    clean_count = clean_usage = failed = runnable_usage = checked_usage = 0
    refused: Counter[str] = Counter()  # runnable templates `app check` refuses -> usage
    gaps: Counter[str] = Counter()  # ComfyUI class -> usage of the templates it blocks
    gap_templates: Counter[str] = Counter()
    families: Counter[str] = Counter()
    blocked: Counter[frozenset[str]] = Counter()  # runnable templates' unsupported classes -> usage
    start = time.perf_counter()
    for name, weight in sorted(usage.items(), key=lambda kv: -kv[1]):
        data: Any = json.loads((folder / f"{name}.json").read_text(encoding="utf-8"))
        try:
            result = import_comfy_data(data, registry, name, title=name)
        except ComfyFormatError as exc:
            failed += 1
            gaps[f"(unreadable: {str(exc)[:60]})"] += weight
            continue
        classes = {u.class_type for u in result.unsupported}
        for family in {problem.family for problem in result.families}:
            families[family] += weight
        for class_type in classes:
            gaps[class_type] += weight
            gap_templates[class_type] += 1
        if classes and not result.families:
            blocked[frozenset(classes)] += weight
        if not classes:
            clean_count += 1
            clean_usage += weight
            runnable_usage += 0 if result.families else weight
            # Issue 32's bar: the check passes too (no models folder given: file names are not checked).
            if not result.families and not check_comfy(result, registry, name):
                checked_usage += weight
            elif not result.families:
                refused[name] = weight
    elapsed = time.perf_counter() - start
    print(f"{len(usage)} open-weight templates imported in {elapsed:.1f} s ({failed} unreadable)")
    print(
        f"no unsupported node: {clean_count} templates ({clean_count / max(len(usage), 1):.1%}), "
        f"{clean_usage / total:.1%} of usage"
    )
    print(f"  and no model family Nodeloom cannot run: {runnable_usage / total:.1%} of usage")
    print(f"  and `app check` clean apart from missing model files: {checked_usage / total:.1%} of usage")
    for name, weight in refused.most_common():
        print(f"    refused by the check: {weight / total:6.1%}  {name}")
    print(f"\nunsupported node types by usage of the templates they block (top {args.top}):")
    for class_type, weight in gaps.most_common(args.top):
        print(f"  {weight / total:6.1%}  {class_type}  ({gap_templates[class_type]} templates)")
    if args.families:
        print("\nmodel families Nodeloom cannot run, by usage:")
        for family, weight in families.most_common():
            print(f"  {weight / total:6.1%}  {family}")
    if args.what_if:
        # A template blocked by several node types gains nothing from one of them: group by the whole set.
        print(
            "\nwhat if (usage added by mapping exactly this set; families all run; the check may still refuse):"
        )
        for classes, weight in blocked.most_common(args.top):
            names = sorted(classes)
            more = f" (+{len(names) - 6} more)" if len(names) > 6 else ""
            print(f"  {weight / total:6.2%}  {' + '.join(names[:6])}{more}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
