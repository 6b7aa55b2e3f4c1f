"""Consolidation: runs that turn episodes into candidate facts and traces into
candidate skills, and the decisions on those candidates."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .. import models as m
from ._base import Resource, body, get, operation, paginated, post


class Consolidation(Resource):
    @operation
    def run(self, *, kind: str | None = None) -> m.RunStart:
        """Start a run ("facts", "duplicates" or "skills"); it works in the background."""
        return post("/consolidation/runs", m.RunStart, body(kind=kind))

    @operation
    def get_run(self, run_id: str) -> m.ConsolidationRun:
        return get(f"/consolidation/runs/{run_id}", m.ConsolidationRun)

    @paginated
    def runs(self, *, limit: int | None = None, **filters: Any) -> Iterator[m.ConsolidationRun]:
        """Filters: kind, status."""
        return get("/consolidation/runs", m.ConsolidationRun, limit=limit, **filters)

    @paginated
    def candidates(self, *, limit: int | None = None, **filters: Any) -> Iterator[m.CandidateFact]:
        """Candidate facts with their evidence. Filters: status, subject, predicate, run."""
        return get("/consolidation/candidates", m.CandidateFact, limit=limit, **filters)

    @operation
    def candidate(self, candidate_id: str) -> m.CandidateFact:
        return get(f"/consolidation/candidates/{candidate_id}", m.CandidateFact)

    @operation
    def accept(self, candidate_id: str) -> m.CandidateFact:
        """Assert the candidate as a fact (its `fact_id` then names it)."""
        return post(f"/consolidation/candidates/{candidate_id}/accept", m.CandidateFact)

    @operation
    def reject(self, candidate_id: str, *, reason: str) -> m.CandidateFact:
        path = f"/consolidation/candidates/{candidate_id}/reject"
        return post(path, m.CandidateFact, {"reason": reason})

    @paginated
    def skill_candidates(
        self, *, limit: int | None = None, **filters: Any
    ) -> Iterator[m.CandidateSkill]:
        """Candidate skills mined from repeated traces. Filters: status, run."""
        path = "/consolidation/skill-candidates"
        return get(path, m.CandidateSkill, limit=limit, **filters)

    @operation
    def skill_candidate(self, candidate_id: str) -> m.CandidateSkill:
        return get(f"/consolidation/skill-candidates/{candidate_id}", m.CandidateSkill)

    @operation
    def reject_skill(self, candidate_id: str, *, reason: str) -> m.CandidateSkill:
        path = f"/consolidation/skill-candidates/{candidate_id}/reject"
        return post(path, m.CandidateSkill, {"reason": reason})
