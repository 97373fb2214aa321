"""episodic.bus: Kafka plumbing shared by the stages.

Owns: topic creation and retention, producers (`kafka`), end offsets and consumer lag (`offsets`), and sending a
journal file to `journal.entries` (`producer`, behind `episodic produce`).
May import: `episodic.kernel`, `episodic.domain`, `schemas` and third-party libraries (aiokafka, tqdm).
A sibling of `episodic.store`: neither imports the other.
"""
