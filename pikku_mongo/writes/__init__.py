"""Writing: the group commit of each hot collection, the writes that ride a run's write
in one command, how a pass's write changes the run's journal, journal pages, and the
operation ids that let a write sent again recognise its first try."""
