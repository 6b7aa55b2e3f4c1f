from django.core.management.base import BaseCommand, CommandError

from episodes.retrieval.calibration import DEFAULT_DATA, abstention_calibrate
from piper.errors import InvalidInput


class Command(BaseCommand):
    help = (
        "Calibrate the 'no supporting memory' threshold of episode retrieval on a data set "
        "of answerable and unanswerable questions, for the embedding model in use, and "
        "record it (the newest calibration for a model is the one retrieval applies)."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--data",
            default=str(DEFAULT_DATA),
            help="calibration set (JSON: episodes and queries); default: the one shipped",
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="print the result without recording it"
        )

    def handle(self, *args, data, dry_run, verbosity, **options):
        try:
            calibration, scored = abstention_calibrate(data_path=data, dry_run=dry_run)
        except InvalidInput as exc:
            raise CommandError(exc.message) from exc
        if verbosity > 1:
            for s in sorted(scored, key=lambda s: (s.evidence is None, s.evidence or 0)):
                mark = "answerable  " if s.answer else "unanswerable"
                rank = f" (answer at {s.answer_rank})" if s.answer_rank else ""
                evidence = "-" if s.evidence is None else f"{s.evidence:.3f}"
                self.stdout.write(f"{evidence:>7}  {mark}  {s.query}{rank}")
        details = calibration.details
        self.stdout.write(
            f"{'Would record' if dry_run else 'Recorded'} {calibration.embedding_model}: "
            f"{calibration.metric} >= {calibration.threshold:.4f} on {calibration.dataset}, "
            f"{calibration.sample_size} queries ({details['answerable']} answerable, "
            f"{details['unanswerable']} unanswerable): "
            f"answerable kept {calibration.answerable_accuracy:.1%}, "
            f"unanswerable refused {calibration.unanswerable_accuracy:.1%}, "
            f"balanced {details['balanced_accuracy']:.1%}; "
            f"answer ranked first for {details['answer_at_1']}/{details['answerable']}."
        )
