"""Convergence rate of gossip repair (thesis §4.2, Fig. 4-2, §7.5).

"A message m converges in k rounds with probability p": after the initial
multicast reached n0 of the n members, every member contacts one member per
gossip round; how many rounds until all n hold m, except with probability
eps?  Five ways to answer, from exact to real, one module each:

``chain``
    The Markov chain on the number of holders (§4.2.1), pull and push under
    uniform selection: ``pull_chain``, ``push_chain``, ``absorption_times``,
    ``failure_curve``, ``chain_rounds``.
``recurrences``
    The per-member recurrence of §4.2.2 for any contact matrix
    (``recurrence``, ``recurrence_rounds``), the thesis's closed form and
    its crude bound; ``topology`` builds the contact matrices of the
    engine's biased selection on a tree or in a plane.
``montecarlo``
    The lock-step process simulated exactly (``monte_carlo``), and uniform
    pull with the engine's timing (``monte_carlo_async``).
``engine_trials``
    The real rpbcast engine in rpbcast.sim or rpbcast.drivers.memnet
    (``engine_monte_carlo``).

``checks`` puts them side by side (the tables behind the figures), ``plots``
draws them, and ``figures.reproduce`` / ``python -m
rpbcast.experiments.convergence --out DIR`` (``cli``) regenerate Fig. 4-2
(n = 100, eps = 1e-6) for uniform, linear and quadratic selection and write
the CSV tables, the PNGs and a JSON summary
(docs/reproduction/convergence.md).  This face re-exports each module's
public names.
"""
from rpbcast.experiments.convergence.chain import (EPS_THESIS, N_THESIS, absorption_times, chain_rounds,
                                                   failure_curve, k_step, pull_chain, push_chain)
from rpbcast.experiments.convergence.checks import (compare_uniform_pull, engine_check, figure_4_2_table,
                                                    mc_check)
from rpbcast.experiments.convergence.cli import main
from rpbcast.experiments.convergence.engine_trials import engine_driver, engine_monte_carlo
from rpbcast.experiments.convergence.figures import reproduce
from rpbcast.experiments.convergence.montecarlo import empirical_failure, monte_carlo, monte_carlo_async, wilson
from rpbcast.experiments.convergence.plots import plot_engine, plot_figure_4_2, plot_mc_check
from rpbcast.experiments.convergence.recurrences import (crude_bound, initial, recurrence, recurrence_failure,
                                                         recurrence_rounds, thesis_quadratic, uniform_contact)
from rpbcast.experiments.convergence.topology import (KINDS, geometric_rtts, initial_sets, topology_contact,
                                                      topology_rounds, tree_rtts)

__all__ = [
    "EPS_THESIS", "N_THESIS", "absorption_times", "chain_rounds", "failure_curve", "k_step", "pull_chain",
    "push_chain", "compare_uniform_pull", "engine_check", "figure_4_2_table", "mc_check", "main",
    "engine_driver", "engine_monte_carlo", "reproduce", "empirical_failure", "monte_carlo",
    "monte_carlo_async", "wilson", "plot_engine", "plot_figure_4_2", "plot_mc_check", "crude_bound",
    "initial", "recurrence", "recurrence_failure", "recurrence_rounds", "thesis_quadratic",
    "uniform_contact", "KINDS", "geometric_rtts", "initial_sets", "topology_contact", "topology_rounds",
    "tree_rtts",
]
