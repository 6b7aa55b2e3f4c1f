"""The ledger events procedural memory writes, by name: the writers in
skills.services append them, and skills.services.rebuild folds them back."""

SKILL_CREATED = "skill.created"
VERSION_CREATED = "skill.version_created"
VERSION_TRANSITIONED = "skill.version_transitioned"
VALIDATION_REQUESTED = "skill.validation_requested"
VALIDATION_FINISHED = "skill.validation_finished"
EXECUTION_REQUESTED = "skill.execution_requested"
EXECUTION_FINISHED = "skill.execution_finished"
EXECUTION_REPORTED = "skill.execution_reported"
TRACE_RECORDED = "skill.trace_recorded"

ALL = (
    SKILL_CREATED,
    VERSION_CREATED,
    VERSION_TRANSITIONED,
    VALIDATION_REQUESTED,
    VALIDATION_FINISHED,
    EXECUTION_REQUESTED,
    EXECUTION_FINISHED,
    EXECUTION_REPORTED,
    TRACE_RECORDED,
)
