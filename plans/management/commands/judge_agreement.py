"""How far the LLM judge agrees with people: raw agreement and Cohen's kappa over a labels CSV."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from plans.evals.judge import RUBRIC_NAME, VerdictUnreadable, answer_judge, outcomes_json
from plans.evals.stats import cohens_kappa
from plans.llm import ModelError
from plans.models import Experiment
from plans.ui.charts import terminal_text

LABELS = ("pass", "fail")
EXIT_BELOW_MIN_KAPPA = 1
# Above about 0.6 a judge is usually workable; below 0.4 it is not measuring what you think.
KAPPA_WORKABLE = 0.6
KAPPA_POOR = 0.4
TEMPLATE_COLUMNS = ("id", "goal", "answer", "outcomes", "judge", "human")


class Command(BaseCommand):
    help = (
        "Compare the judge's pass/fail with human labels in LABELS.csv (columns id, human, and "
        "either judge or goal + answer [+ outcomes]); print raw agreement and Cohen's kappa."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("labels", type=Path, help="the labels CSV")
        parser.add_argument(
            "--rejudge",
            action="store_true",
            help="ask the judge again even where the file has its label",
        )
        parser.add_argument(
            "--template",
            type=int,
            metavar="EXPERIMENT",
            help="write LABELS.csv from a judged experiment for people to label, then stop",
        )
        parser.add_argument("--min-kappa", type=float, help="exit 1 when kappa is below this")
        parser.add_argument("--json", action="store_true", help="print one JSON object")

    def handle(self, *args: Any, **options: Any) -> None:
        path: Path = options["labels"]
        if options["template"] is not None:
            count = _write_template(path, options["template"])
            self.stdout.write(f"wrote {count} answers to {path}: fill in the human column")
            return
        rows = _read_rows(path)
        judged, human, ids, errors = [], [], [], []
        for row in rows:
            label = (row.get("judge") or "").strip().lower()
            if options["rejudge"] or not label:
                try:
                    label = _judge_row(row)
                except (ModelError, VerdictUnreadable, ValueError) as error:
                    errors.append(f"row {row['id']}: no verdict: {error}")
                    continue
            if label not in LABELS:
                raise CommandError(f"row {row['id']}: judge label {label!r} is not pass or fail")
            judged.append(label)
            human.append(row["human"])
            ids.append(row["id"])
        if not ids:
            raise CommandError("no row has both a judge and a human label" + _listed(errors))
        agreement = cohens_kappa(judged, human)
        confusion = {
            f"judge {j} / human {h}": sum(
                1 for a, b in zip(judged, human, strict=True) if (a, b) == (j, h)
            )
            for j in LABELS
            for h in LABELS
        }
        disagreements = [i for i, j, h in zip(ids, judged, human, strict=True) if j != h]
        report = {
            "rubric": RUBRIC_NAME,
            "n": agreement.n,
            "raw_agreement": round(agreement.observed, 4),
            "chance_agreement": round(agreement.expected, 4),
            "kappa": round(agreement.kappa, 4),
            "reading": _reading(agreement.kappa),
            "confusion": confusion,
            "disagreements": disagreements,
            "errors": errors,
        }
        if options["json"]:
            self.stdout.write(json.dumps(report, indent=2))
        else:
            self.stdout.write(
                f"{agreement.n} answers labelled by the judge ({RUBRIC_NAME}) and people"
            )
            self.stdout.write(f"raw agreement     {agreement.observed:.1%}")
            self.stdout.write(f"chance agreement  {agreement.expected:.1%}")
            self.stdout.write(f"Cohen's kappa     {agreement.kappa:.3f}  ({report['reading']})")
            for name, count in confusion.items():
                self.stdout.write(f"  {name}: {count}")
            if disagreements:
                self.stdout.write(terminal_text(f"disagreements: {', '.join(disagreements)}"))
            for problem in errors:
                self.stdout.write(terminal_text(problem))  # quotes the judge model's errors
        if options["min_kappa"] is not None and agreement.kappa < options["min_kappa"]:
            sys.exit(EXIT_BELOW_MIN_KAPPA)


def _reading(kappa: float) -> str:
    if kappa >= KAPPA_WORKABLE:
        return "workable"
    if kappa >= KAPPA_POOR:
        return "weak: read the disagreements before trusting the judge"
    return "poor: the judge is not measuring what the labels do; rewrite the rubric"


def _read_rows(path: Path) -> list[dict[str, str]]:
    try:
        with path.open(newline="", encoding="utf-8-sig") as handle:
            reader = csv.DictReader(handle)
            columns = set(reader.fieldnames or [])
            rows = list(reader)
    except FileNotFoundError:
        raise CommandError(f"labels file {path} does not exist") from None
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        raise CommandError(f"labels file {path} cannot be read: {error}") from None
    missing = {"id", "human"} - columns
    if missing:
        raise CommandError(f"labels file {path} has no {' or '.join(sorted(missing))} column")
    if "judge" not in columns and not {"goal", "answer"} <= columns:
        raise CommandError(
            f"labels file {path} needs a judge column, or goal and answer columns to judge"
        )
    labelled = []
    for number, row in enumerate(rows, start=2):  # line 1 is the header
        row["id"] = (row.get("id") or "").strip() or f"line {number}"
        row["human"] = (row.get("human") or "").strip().lower()
        if not row["human"]:
            continue  # not labelled yet
        if row["human"] not in LABELS:
            raise CommandError(
                f"labels file {path}, line {number}: human label {row['human']!r} is not "
                "pass or fail"
            )
        labelled.append(row)
    return labelled


def _judge_row(row: dict[str, str]) -> str:
    if not (row.get("goal") or "").strip() or not (row.get("answer") or "").strip():
        raise ValueError("the row has no judge label and no goal and answer to judge")
    verdict = answer_judge(
        goal=row["goal"], answer=row["answer"], outcomes=outcomes_json(row.get("outcomes") or "")
    )
    return verdict.label


def _write_template(path: Path, experiment_id: int) -> int:
    experiment = Experiment.objects.filter(pk=experiment_id).first()
    if experiment is None:
        raise CommandError(f"there is no experiment {experiment_id}")
    results = experiment.results.select_related("run__goal").order_by("case_id", "attempt")
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=TEMPLATE_COLUMNS)
        writer.writeheader()
        count = 0
        for result in results:
            run = result.run
            if run is None or not run.answer:
                continue
            steps = run.plans.order_by("version").values_list(
                "steps__step_id",
                "steps__tool",
                "steps__resolved_args",
                "steps__status",
                "steps__result",
                "steps__error",
            )
            outcomes = [
                {
                    "id": s[0],
                    "tool": s[1],
                    "args": s[2],
                    "status": s[3],
                    "result": s[4],
                    "error": s[5],
                }
                for s in steps
                if s[0] is not None
            ]
            judge = result.judge or {}
            writer.writerow(
                {
                    "id": result.case_id
                    if experiment.repeat == 1
                    else f"{result.case_id}#{result.attempt}",
                    "goal": run.goal.text,
                    "answer": run.answer,
                    "outcomes": json.dumps(outcomes, ensure_ascii=False),
                    "judge": judge.get("verdict", ""),
                    "human": "",
                }
            )
            count += 1
    return count


def _listed(errors: list[str]) -> str:
    return (": " + "; ".join(errors)) if errors else ""
