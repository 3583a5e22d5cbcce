"""The lab: the reference article's experiments E1-E9, re-run against a real database,
and E10 of its own (durable workflows under SIGKILL).

Correct variants use sqljobs' own code paths; the broken variants (labelled "don't") live
only here, run real SQL on the same database, and exist to show what goes wrong.
"""
