"""episodic.domain: the memory's pure rules, shared by every concern above. No IO, no settings, no framework.

Owns: who a memory is (`identity`: point ids, the duplicate key), what is worth keeping and at what base
importance (`policy`), how importance decays and reinforces and what retention may take (`scoring`), the
health formula and bands (`health`), how a text is cut into pieces for the dense model (`chunking`), the
context mode as a value (`context_mode`), a memory's review state and what reviews do to importance
(`review`: FSRS, issue 26), when two memories say the same thing (`folding`) and the lenient parsing of
stored times (`times`).
May import: the standard library, numpy, fsrs (py-fsrs: the FSRS formulas, pure), snowballstemmer (the fold
rule's stems, pure) and text2num (its spelled-out numbers, pure); nothing of ours.

Why these sit at the bottom rather than with their concern (scoring with maintenance, chunking and policy
with embedding): the code says so. The metrics of every stage label their series with the health bands,
the policy's decisions and the chunk modes; recall ranks with the scoring's time parsing; the settings
parse the context mode. Kept apart, each of them would pull its whole concern below the kernel.
"""
