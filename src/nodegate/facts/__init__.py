"""pyinfra facts that pyinfra itself lacks, for the nodegate roles.

Each fact is a pure parser of one command's output, so the roles can be tested with facts in
and commands out, and the node's state is always read, never assumed.
"""
