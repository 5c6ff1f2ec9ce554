"""The ``rpbcast`` command line: ``cli`` dispatches to the command families
(``commands``: node, logger, pub, sub, stat, selfcheck; ``stress``: the main
job, whose processes run ``stress_worker``), and the helpers they share
(``netns``: network namespaces for tests and the main job)."""
