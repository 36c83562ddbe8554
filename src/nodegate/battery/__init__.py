"""The validation battery: the check catalogue (``registry``) and the engine that runs probes
and the judge by group and level (``engine`` for the quick checks; ``load``, ``storage``,
``network``, ``power`` for the rest; ``run`` for a whole level under the node's lock), which
both front ends call: the CLI (``nodegate.commands``) and pytest (``nodegate.testing``)."""
