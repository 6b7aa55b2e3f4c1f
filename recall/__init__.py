"""The recall router: one endpoint for every memory (DESIGN.md §2, "which memory
should answer this?").

It sits above facts, episodes, skills and intentions — it reads each only
through that app's selectors and writes nothing into any of them — and below
battery, which drives it through the API. Its own rows are telemetry: a
RetrievalTrace per recall and the agent's RecallFeedback on it.
"""
