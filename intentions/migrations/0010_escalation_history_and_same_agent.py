"""PostgreSQL keeps escalations honest, as 0003 does for firings.

* An escalation is history: never updated once written (deleted only with its
  intention).
* It references only its own agent's intention (a composite foreign key).
"""

from django.db import migrations

FORWARD = """
CREATE TRIGGER intentions_escalation_history BEFORE UPDATE ON intentions_escalation
    FOR EACH ROW EXECUTE FUNCTION intentions_history_guard();
ALTER TABLE intentions_escalation ADD CONSTRAINT intentions_escalation_same_agent
    FOREIGN KEY (agent_id, intention_id) REFERENCES intentions_intention (agent_id, id)
    DEFERRABLE INITIALLY DEFERRED;
"""

BACKWARD = """
ALTER TABLE intentions_escalation DROP CONSTRAINT intentions_escalation_same_agent;
DROP TRIGGER intentions_escalation_history ON intentions_escalation;
"""


class Migration(migrations.Migration):
    dependencies = [("intentions", "0009_escalation")]
    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
