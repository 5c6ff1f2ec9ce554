"""Reproductions of the papers' experiments, one command each.

Each topic module (``thesis``, ``gsgc``, ``srb``) defines ``EXPERIMENTS``:
a dict from a name such as ``fig7-2`` to an :class:`Experiment`.  Running one
writes a results table (CSV and Markdown), a PNG plot and ``meta.json`` (the
command, parameters, seeds, run time) into a results folder; see
``rpbcast experiment --help`` and ``docs/reproduction.md``.
"""
