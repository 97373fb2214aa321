"""episodic.maintenance: the stream agents' logic, over the ports (no Kafka, no Faust: `streams/` runs it).

Owns: similar edges (`linker`), reference counts (`importance`), the nightly decay and retention (`decay`,
on the cron schedule of `schedule`), health snapshots and the inputs kept between them (`health_job`,
`health_inputs`), the in-session nudge (`nudge`) and the replay marks that apply each record to a stored
document at most once (`marks`, named `replay` before: it is not the DLQ's replay).
May import: every sub-package of the core below it (`lifecycle`, `retrieval`, `indexing`, `embedding`,
`store`, `bus`, `kernel`, `domain`), `schemas`, `episodic_client` (timestamps) and third-party libraries. It
is the top of the core: retention forgets through `lifecycle`.
"""
