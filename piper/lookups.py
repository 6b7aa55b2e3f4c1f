"""`field__any=[…]`: membership as `= ANY(%s)` with one array parameter.

Django writes `field__in=[…]` as `IN (%s, %s, …)`: with the thousands of ids
an erasure or a retention chunk names, compiling the placeholders and binding
each value cost more than the statements themselves (docs/benchmarks.md,
forgetting). One array parameter is compiled and bound once.
"""

from __future__ import annotations

from uuid import UUID

from django.db.models import Field, ForeignKey, ForeignObject, Lookup, UUIDField


class AnyOf(Lookup):
    lookup_name = "any"
    prepare_rhs = False

    def get_db_prep_lookup(self, value, connection):
        field = getattr(self.lhs.output_field, "target_field", self.lhs.output_field)
        values = [field.get_db_prep_value(v, connection, prepared=False) for v in value]
        if isinstance(field, UUIDField):
            return "%s", [uuid_array(values)]
        return "%s", [values]

    def as_sql(self, compiler, connection):
        lhs, lhs_params = self.process_lhs(compiler, connection)
        _, rhs_params = self.get_db_prep_lookup(self.rhs, connection)
        db_type = (
            self.lhs.output_field.rel_db_type(connection)
            if isinstance(self.lhs.output_field, ForeignKey)
            else self.lhs.output_field.db_type(connection)
        )
        return f"{lhs} = ANY(%s::{db_type}[])", [*lhs_params, *rhs_params]


def uuid_array(ids) -> str:
    """uuids as one PostgreSQL array literal ('{…}', cast with ::uuid[]): psycopg
    quotes one string instead of checking every element of a list, which was a
    large share of a long statement's time. A UUID is written as its 32 hex
    digits, which PostgreSQL reads as well, since str()'s hyphenation was a
    tenth of a retention chunk's time (docs/benchmarks.md, forgetting)."""
    return "{" + ",".join([i.hex if isinstance(i, UUID) else str(i) for i in ids]) + "}"


def register() -> None:
    Field.register_lookup(AnyOf)
    ForeignObject.register_lookup(AnyOf)  # related fields keep lookups of their own
