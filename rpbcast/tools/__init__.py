"""The ``rpbcast`` command line: ``cli`` dispatches to the command families
(``commands``: node, logger, pub, sub, stat, selfcheck, with the options
every node command takes in ``node_options`` and the stats socket in
``stats``; ``stress``: the main job, a package whose processes run
``stress.worker``), and the helpers they share (``netns``: network
namespaces for tests and the main job)."""
